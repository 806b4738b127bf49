# frozen_string_literal: true

require_relative "test_helper"

# A connection reset with the request unread (ECONNRESET: keyholed closed it without reading what
# the client wrote, or never accepted it before its socket was closed) is a lost connection like any
# other (PROTOCOL.md section 8, rule 2): a safe request is sent again once, a change is not. A reset
# does not prove that this request went unread (with several in flight, keyholed may have read and
# applied an earlier one before it stopped), so it earns no further re-sends. Served by a Ruby
# UNIXServer that closes each connection once the request has arrived, without reading it.
class ResetTest < Minitest::Test
  PING = { "protocol" => 1, "version" => "0.0.0-reset", "uptime_ms" => 1 }.freeze

  def setup
    @path = KeyholeTest.socket_path("reset")
    @server = UNIXServer.new(@path)
    @seen = Queue.new
  end

  def teardown
    @server.close
    File.unlink(@path) if File.exist?(@path)
  end

  # Resets +resets+ connections, then answers every request of the next one with PING.
  def serve(resets)
    Thread.new do
      resets.times do
        conn = @server.accept
        conn.wait_readable(10)
        @seen << :reset
        conn.close # unread bytes in its queue: the client reads ECONNRESET
      end
      conn = @server.accept
      while (request = KeyholeTest.read_frame(conn))
        @seen << request["op"]
        KeyholeTest.write_frame(conn, { "id" => request["id"], "ok" => true, "result" => PING })
      end
      conn.close
    end
  end

  def test_safe_request_is_sent_again_once_after_a_reset
    server = serve(1)
    client = Keyhole::Client.new(socket: @path, timeout: 2)
    assert_equal PING, client.call("session.get", "session" => "kh_x")
    client.close
    server.join(5)
    assert_equal %i[reset] + ["session.get"], Array.new(@seen.size) { @seen.pop }
  end

  def test_safe_request_reset_twice_is_connection_lost
    server = serve(2)
    client = Keyhole::Client.new(socket: @path, timeout: 2)
    error = assert_raises(Keyhole::ConnectionLost) { client.call("session.get", "session" => "kh_x") }
    assert_equal "connection_lost", error.code
    assert_equal PING, client.ping
    client.close
    server.join(5)
    assert_equal %i[reset reset] + ["ping"], Array.new(@seen.size) { @seen.pop }
  end

  def test_change_is_not_sent_again_after_a_reset
    server = serve(1)
    client = Keyhole::Client.new(socket: @path, timeout: 2)
    error = assert_raises(Keyhole::ConnectionLost) { client.call("session.create", "sub" => "alice") }
    assert_equal "connection_lost", error.code
    assert_equal PING, client.ping
    client.close
    server.join(5)
    assert_equal [:reset, "ping"], Array.new(@seen.size) { @seen.pop }
  end
end
