# frozen_string_literal: true

require_relative "test_helper"

# keyholed refuses a connection by writing an error with a null id (overloaded on connect) and
# closing it. A client that finds it closed when it writes reads what keyholed left and fails the
# call with that error at once (PROTOCOL.md section 8, rule 4), rather than reconnecting until its
# deadline and answering unavailable. Served by a Ruby UNIXServer that answers one ping, then, once
# the ping has returned (so that nobody reads), refuses the connection before the next request
# arrives and removes its socket (so that a client that reconnects instead finds nobody, and
# answers unavailable).
class RefusalTest < Minitest::Test
  PING = { "protocol" => 1, "version" => "0.0.0-refusal", "uptime_ms" => 1 }.freeze
  OVERLOADED = { "code" => "overloaded", "message" => "too many connections", "retry_after_ms" => 250 }.freeze

  def setup
    @path = KeyholeTest.socket_path("refuse")
    @server = UNIXServer.new(@path)
    @seen = Queue.new
    @closed = Queue.new
    @go = Queue.new
  end

  def teardown
    @server.close unless @server.closed?
    File.unlink(@path) if File.exist?(@path)
  end

  def serve
    Thread.new do
      conn = @server.accept
      request = KeyholeTest.read_frame(conn)
      @seen << request["op"]
      KeyholeTest.write_frame(conn, { "id" => request["id"], "ok" => true, "result" => PING })
      @go.pop # the ping is answered and nobody reads: what follows stays unread
      KeyholeTest.write_frame(conn, { "id" => nil, "ok" => false, "error" => OVERLOADED })
      conn.close
      @server.close
      File.unlink(@path)
      @closed << true
    end
  end

  def test_error_left_on_a_connection_closed_before_the_write_fails_the_call
    server = serve
    client = Keyhole::Client.new(socket: @path, timeout: 2)
    assert_equal PING, client.ping
    @go << true
    @closed.pop # the connection is closed, the error unread on it, and the socket gone
    error = assert_raises(Keyhole::Error) { client.call("session.get", "session" => "kh_x") }
    assert_equal "overloaded", error.code
    assert_equal "too many connections", error.message
    assert_equal 250, error.retry_after_ms
    client.close
    server.join(5)
    assert_equal ["ping"], Array.new(@seen.size) { @seen.pop }, "the refused call was never sent"
  end
end
