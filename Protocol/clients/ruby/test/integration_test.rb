# frozen_string_literal: true

require_relative "test_helper"

# Against a real keyholed (Protocol/testing/keyholed_harness.py, $KEYHOLED).
class IntegrationTest < Minitest::Test
  def harness = KeyholeTest::Harness.shared

  def setup
    @client = Keyhole::Client.new(socket: harness.socket)
  end

  def teardown
    @client.close
  end

  def test_ping
    result = @client.ping
    assert_equal 1, result["protocol"]
    assert_kind_of String, result["version"]
    assert_kind_of Integer, result["uptime_ms"]
  end

  def test_socket_from_environment
    previous = ENV["KEYHOLE_SOCKET"]
    ENV["KEYHOLE_SOCKET"] = harness.socket
    client = Keyhole::Client.new
    assert_equal harness.socket, client.socket_path
    assert_equal 1, client.ping["protocol"]
    client.close
    ENV.delete("KEYHOLE_SOCKET")
    assert_equal "/run/keyhole/keyhole.sock", Keyhole::Client.new.socket_path
  ensure
    previous ? ENV["KEYHOLE_SOCKET"] = previous : ENV.delete("KEYHOLE_SOCKET")
  end

  def test_verify_token
    result = @client.verify_token(harness.token)
    assert_equal "apple", result["issuer"]
    assert_equal harness.sub, result["sub"]
    assert_equal harness.sub, result["claims"]["sub"]
  end

  def test_forged_token_is_refused
    header, payload, signature = harness.token.split(".")
    forged = [header, payload, signature.reverse].join(".")
    error = assert_raises(Keyhole::Error) { @client.verify_token(forged) }
    assert_match(/\Atoken_/, error.code)
  end

  def test_session_create_get_list_revoke_and_user
    sub = "rb-#{rand(1 << 40)}"
    created = @client.create_session(sub, data: { "role" => "tester" })
    assert_match(/\Akh_[A-Za-z0-9_-]{43}\z/, created["session"])
    session = @client.get_session(created["session"])
    assert_equal created["id"], session["id"]
    assert_equal sub, session["sub"]
    assert_equal({ "role" => "tester" }, session["data"])
    assert_equal sub, session["user"]["sub"]
    assert_equal([created["id"]], @client.list_sessions(sub)["sessions"].map { |s| s["id"] })
    user = @client.get_user(sub)
    assert_equal sub, user["sub"]
    assert_equal "apple", user["issuer"]
    assert_equal({ "revoked" => true }, @client.revoke_session(session: created["session"]))
    assert_equal({ "revoked" => false }, @client.revoke_session(id: created["id"]))
    error = assert_raises(Keyhole::Error) { @client.get_session(created["session"]) }
    assert_equal "session_not_found", error.code
    assert_equal [], @client.list_sessions(sub)["sessions"]
  end

  def test_error_codes
    error = assert_raises(Keyhole::Error) { @client.get_session("kh_#{'A' * 43}") }
    assert_equal "session_not_found", error.code
    assert_instance_of Keyhole::Error, error
    error = assert_raises(Keyhole::Error) { @client.get_user("rb-nobody-#{rand(1 << 40)}") }
    assert_equal "user_not_found", error.code
    error = assert_raises(Keyhole::Error) { @client.call("no.such_op") }
    assert_equal "unknown_op", error.code
    assert_raises(ArgumentError) { @client.revoke_session }
  end

  # Every helper reaches its operation: keyholed knows it (no unknown_op) and takes its arguments
  # (no bad_request naming one). The apple.* ones answer not_configured here (no [apple] section).
  def test_every_helper_reaches_its_operation
    sub = "rb-helpers-#{rand(1 << 40)}"
    token = @client.create_session(sub)["session"]
    invocations = {
      ping: [], stats: [], verify_token: [harness.token], jwks_status: [], jwks_refresh: [],
      create_session: [sub], get_session: [token], revoke_session: [{ session: token }],
      revoke_all_sessions: [sub], list_sessions: [sub], get_user: [sub],
      update_user: [sub, { email: "a@example.com", name: { "given" => "A" } }], delete_user: [sub],
      apple_sign_in: [harness.token], apple_notification: ["a.b.c"], apple_refresh_check: [sub],
      apple_transfer_export: [sub, { target_team_id: "ABCDE12345" }], apple_transfer_import: ["t"],
      apple_pending: [], apple_authorize: [{ return_to: "/" }],
      apple_callback: [{ "state" => "s", "code" => "c", "id_token" => "x" }, { cookie: "c" }],
      admin_snapshot: [], admin_reload: []
    }
    assert_equal Keyhole::Helpers::METHODS.values.sort, invocations.keys.sort
    invocations.each do |name, args|
      kwargs = args.last.is_a?(Hash) ? args.last : {}
      positional = args.last.is_a?(Hash) ? args[0..-2] : args
      begin
        result = @client.public_send(name, *positional, **kwargs)
        assert_kind_of Hash, result, name
      rescue Keyhole::Error => e
        refute_includes %w[unknown_op bad_request permission_denied], e.code, "#{name}: #{e.inspect}"
      end
    end
  end

  def test_threads_share_one_connection
    subs = Array.new(8) { |i| "rb-thread-#{i}-#{rand(1 << 40)}" }
    tokens = subs.map { |s| @client.create_session(s)["session"] }
    threads = subs.zip(tokens).map do |sub, token|
      Thread.new { Array.new(40) { @client.get_session(token)["sub"] }.uniq == [sub] }
    end
    assert threads.all?(&:value), "every thread got its own sessions' answers"
  end

  def test_timeout_keeps_the_connection_and_drops_the_late_answer
    client = Keyhole::Client.new(socket: harness.socket, timeout: 0.2)
    assert_equal 1, client.ping["protocol"]
    error = assert_raises(Keyhole::TimeoutError) { client.call("debug.sleep", "ms" => 600) }
    assert_equal "timeout", error.code
    slow = Keyhole::Client.new(socket: harness.socket, timeout: 2)
    slow.call("debug.sleep", "ms" => 500) # the late answer is now due on the first connection
    assert_equal 1, client.ping["protocol"]
    slow.close
    client.close
  end

  def test_unreachable_is_unavailable_within_the_deadline
    client = Keyhole::Client.new(socket: KeyholeTest.socket_path("none"), timeout: 0.3)
    started = Keyhole::Client.now
    error = assert_raises(Keyhole::Unavailable) { client.ping }
    elapsed = Keyhole::Client.now - started
    assert_equal "unavailable", error.code
    assert_operator elapsed, :>=, 0.29
    assert_operator elapsed, :<, 1.0
  end

  def test_closed_client_refuses_calls
    client = Keyhole::Client.new(socket: harness.socket)
    client.ping
    client.close
    assert_equal "unavailable", assert_raises(Keyhole::Error) { client.ping }.code
  end

  def test_forked_child_opens_its_own_connection
    @client.ping
    parent_connection = @client.instance_variable_get(:@connection)
    reader, writer = IO.pipe
    pid = fork do
      reader.close
      protocol = @client.ping["protocol"]
      own = !@client.instance_variable_get(:@connection).equal?(parent_connection)
      writer.write("#{protocol} #{own ? "own" : "shared"}")
      writer.close
      exit!(0)
    end
    writer.close
    assert_equal "1 own", reader.read
    assert KeyholeTest.wait_exit(pid)&.success?
    assert_equal 1, @client.ping["protocol"], "the parent's connection is untouched"
    assert_same parent_connection, @client.instance_variable_get(:@connection)
  end

  # IO.popen("-") forks through Process._fork too (what ForkTracker hooks instead of calling getpid
  # on every call).
  def test_popen_child_opens_its_own_connection
    @client.ping
    parent_connection = @client.instance_variable_get(:@connection)
    output = IO.popen("-") do |child|
      if child
        child.read
      else
        own = (@client.ping["protocol"] == 1) && !@client.instance_variable_get(:@connection).equal?(parent_connection)
        $stdout.write(own ? "own" : "shared")
        $stdout.flush
        exit!(0)
      end
    end
    assert_equal "own", output
    assert_equal 1, @client.ping["protocol"]
    assert_same parent_connection, @client.instance_variable_get(:@connection)
  end
end

# Against a server scripted in Ruby (a UNIXServer in a thread of the test), which tells the test what
# it has read: no timing and no thread states stand in for "written".
class ScriptedServerTest < Minitest::Test
  def setup
    @path = KeyholeTest.socket_path("script")
    @server = UNIXServer.new(@path)
    @read = Queue.new
  end

  def teardown
    @server.close
    File.unlink(@path) if File.exist?(@path)
  end

  # Five calls from five threads are in flight together on one connection: the server reads all
  # five requests before it answers any (a client that waited for an answer before sending the
  # next would never get one), then answers them in the reverse order.
  def test_pipelined_requests_do_not_wait_for_each_other
    server = Thread.new do
      conn = @server.accept
      requests = Array.new(5) { KeyholeTest.read_frame(conn) }
      requests.reverse_each { |r| KeyholeTest.write_frame(conn, { "id" => r["id"], "ok" => true, "result" => r["args"] }) }
      @read << KeyholeTest.read_frame(conn) # nil: the client closed, and opened no other connection
      conn.close
    end
    client = Keyhole::Client.new(socket: @path, timeout: 5)
    results = Array.new(5) { |i| Thread.new { client.call("debug.echo", "n" => i) } }.map(&:value)
    assert_equal Array.new(5) { |i| { "n" => i } }, results
    client.close
    server.join(5)
    assert_nil @read.pop
  end

  # Client#close fails a call whose request keyholed has read and not answered: connection_lost.
  def test_close_fails_a_waiting_call
    server = Thread.new do
      conn = @server.accept
      @read << KeyholeTest.read_frame(conn)["op"]
      KeyholeTest.read_frame(conn) # holds the connection, unanswered, until the client closes it
      conn.close
    end
    client = Keyhole::Client.new(socket: @path, timeout: 5)
    waiting = Thread.new do
      client.call("session.get", "session" => "kh_x")
    rescue Keyhole::Error => e
      e
    end
    assert_equal "session.get", @read.pop # written and read: the call now waits for its answer
    client.close
    error = waiting.value
    assert_instance_of Keyhole::ConnectionLost, error
    assert_equal "connection_lost", error.code
    server.join(5)
  end
end

# Interrupted calls (Timeout.timeout, as Rack::Timeout uses) leave the connection usable.
class InterruptTest < Minitest::Test
  def test_interrupted_call_leaves_the_client_usable
    require "timeout"
    client = Keyhole::Client.new(socket: KeyholeTest::Harness.shared.socket)
    assert_raises(Timeout::Error) { Timeout.timeout(0.1) { client.call("debug.sleep", "ms" => 500) } }
    assert_equal 1, client.ping["protocol"]
    threads = Array.new(3) { Thread.new { client.call("debug.sleep", "ms" => 50) } }
    assert_equal [{ "slept_ms" => 50 }] * 3, threads.map(&:value)
    client.close
  end
end
