# frozen_string_literal: true

require_relative "test_helper"

# keyholed's goodbye (PROTOCOL.md section 5; section 8, rule 3): a connection drained at shutdown
# ends with an error with a null id and code shutting_down, which says that every request on it
# still unanswered was never read. Each of those calls goes again on a new connection whatever its
# operation, and that is not rule 2's one re-send: a change turned away by two goodbyes goes a third
# time, and only the deadline bounds it. Any other error with a null id (overloaded on connect,
# bad_frame, frame_too_large) still fails the calls it leaves unanswered (rule 4). Served by a Ruby
# UNIXServer that does to a request what a keyholed shutting down does to one it has not read: the
# request arrives, and the server says goodbye and closes the connection without reading it (so the
# client reads the goodbye, then ECONNRESET).
class GoodbyeTest < Minitest::Test
  PING = { "protocol" => 1, "version" => "0.0.0-goodbye", "uptime_ms" => 1 }.freeze
  CREATED = { "session" => "kh_#{'A' * 43}", "id" => "A" * 22, "issuer" => "local", "sub" => "alice",
              "created_at" => 1_767_225_600, "expires_at" => 1_769_817_600 }.freeze
  GOODBYE = { "code" => "shutting_down",
              "message" => "keyholed is shutting down: requests on this connection still unanswered " \
                           "were not read; send them again on a new connection" }.freeze
  OVERLOADED = { "code" => "overloaded", "message" => "too many connections", "retry_after_ms" => 250 }.freeze
  ALICE = { "sub" => "alice" }.freeze

  def setup
    @path = KeyholeTest.socket_path("goodbye")
    @server = UNIXServer.new(@path)
    @seen = Queue.new
    @go = Queue.new
    @said = Queue.new
  end

  def teardown
    @server.close unless @server.closed?
    File.unlink(@path) if File.exist?(@path)
  end

  # Turns a request away unread with keyholed's +error+ with a null id: once it has arrived, the
  # error is written and the connection closed with the request still in it.
  def turn_away(conn, error)
    conn.wait_readable(10)
    @seen << :unread
    KeyholeTest.write_frame(conn, { "id" => nil, "ok" => false, "error" => error })
    conn.close
  end

  # Answers every request on +conn+ (ping and session.create) until the client closes it.
  def answer_all(conn)
    while (request = KeyholeTest.read_frame(conn))
      @seen << [request["op"], request["args"]]
      result = request["op"] == "session.create" ? CREATED : PING
      KeyholeTest.write_frame(conn, { "id" => request["id"], "ok" => true, "result" => result })
    end
    conn.close
  end

  # One connection per error of +errors+ turned away with it, then one that answers everything.
  def serve(*errors)
    Thread.new do
      errors.each { |error| turn_away(@server.accept, error) }
      answer_all(@server.accept)
    end
  end

  def seen = Array.new(@seen.size) { @seen.pop }

  def test_change_is_sent_again_after_a_goodbye
    server = serve(GOODBYE)
    client = Keyhole::Client.new(socket: @path, timeout: 2)
    assert_equal CREATED, client.call("session.create", ALICE)
    client.close
    server.join(5)
    assert_equal [:unread, ["session.create", ALICE]], seen
  end

  def test_change_turned_away_by_two_goodbyes_goes_a_third_time
    server = serve(GOODBYE, GOODBYE)
    client = Keyhole::Client.new(socket: @path, timeout: 2)
    assert_equal CREATED, client.call("session.create", ALICE)
    client.close
    server.join(5)
    assert_equal [:unread, :unread, ["session.create", ALICE]], seen
  end

  # The same connection turned away with overloaded instead: rule 4, the call fails with it and is
  # not sent again (the next connection sees only the ping that follows).
  def test_another_null_id_error_still_fails_the_call
    server = serve(OVERLOADED)
    client = Keyhole::Client.new(socket: @path, timeout: 2)
    error = assert_raises(Keyhole::Error) { client.call("session.create", ALICE) }
    assert_equal "overloaded", error.code
    assert_equal 250, error.retry_after_ms
    assert_equal PING, client.ping
    client.close
    server.join(5)
    assert_equal [:unread, ["ping", {}]], seen
  end

  # A shutting_down with a null id on every connection: the call goes again each time until its
  # deadline, then fails (a goodbye earns no answer, so it never fails with shutting_down).
  def test_only_the_deadline_bounds_the_goodbyes
    server = Thread.new do
      loop { turn_away(@server.accept, GOODBYE) }
    rescue IOError, SystemCallError
      nil # the listening socket closed by the test
    end
    client = Keyhole::Client.new(socket: @path, timeout: 0.5)
    error = assert_raises(Keyhole::Error) { client.call("session.create", ALICE) }
    assert_includes %w[unavailable timeout], error.code, error.inspect
    client.close
    @server.close
    server.join(5)
    assert_operator seen.count(:unread), :>=, 3, "sent again after each goodbye, until the deadline"
  end

  # The goodbye came while the connection was idle, after the ping's answer had been read, and
  # keyholed has not closed the connection yet: the client's next request is written on it, and the
  # goodbye read after says it was not read. It goes on a new connection.
  def test_goodbye_found_after_writing_on_an_idle_connection
    server = Thread.new do
      conn = @server.accept
      answer_one(conn)
      @go.pop # the ping has returned and nobody reads: the goodbye stays in the client's socket
      KeyholeTest.write_frame(conn, { "id" => nil, "ok" => false, "error" => GOODBYE })
      conn.close_write
      @said << true
      request = KeyholeTest.read_frame(conn) # written after the goodbye: dropped, never answered
      @seen << [:dropped, request && request["op"]]
      conn.close
      answer_all(@server.accept)
    end
    client = Keyhole::Client.new(socket: @path, timeout: 2)
    assert_equal PING, client.ping
    @go << true
    @said.pop
    assert_equal CREATED, client.call("session.create", ALICE)
    client.close
    server.join(5)
    assert_equal [["ping", {}], [:dropped, "session.create"], ["session.create", ALICE]], seen
  end

  # The same, with the connection closed before the client writes: the write fails (EPIPE), and the
  # goodbye left on the connection says to send the change on a new one, rather than failing it as
  # an error with a null id about the connection would (rule 4).
  def test_goodbye_left_on_a_connection_closed_before_the_write
    server = Thread.new do
      conn = @server.accept
      answer_one(conn)
      @go.pop
      KeyholeTest.write_frame(conn, { "id" => nil, "ok" => false, "error" => GOODBYE })
      conn.close
      @said << true
      answer_all(@server.accept)
    end
    client = Keyhole::Client.new(socket: @path, timeout: 2)
    assert_equal PING, client.ping
    @go << true
    @said.pop
    assert_equal CREATED, client.call("session.create", ALICE)
    client.close
    server.join(5)
    assert_equal [["ping", {}], ["session.create", ALICE]], seen
  end

  private

  # Answers one request on +conn+.
  def answer_one(conn)
    request = KeyholeTest.read_frame(conn)
    @seen << [request["op"], request["args"]]
    KeyholeTest.write_frame(conn, { "id" => request["id"], "ok" => true, "result" => PING })
  end
end
