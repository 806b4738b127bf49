# frozen_string_literal: true

require_relative "test_helper"

# The restart tests of Protocol/testing/README.md: keyholed stopped and started again with its
# socket kept, and with the socket gone for 200 ms, six times, while a loop calls it. Each test has
# a keyholed of its own.
class RestartTest < Minitest::Test
  CYCLES = 6

  def setup
    @harness = KeyholeTest::Harness.new
    @client = Keyhole::Client.new(socket: @harness.socket)
  end

  def teardown
    @client.close
    @harness.stop
  end

  def test_reads_survive_restarts
    token = @client.create_session("restart-reader")["session"]
    calls = 0
    failures = []
    chaos(CYCLES, 200) do
      begin
        session = @client.get_session(token)
        failures << "wrong session #{session['id']}" unless session["sub"] == "restart-reader"
      rescue Keyhole::Error => e
        failures << e.inspect
      end
      calls += 1
    end
    assert_empty failures
    assert_operator calls, :>, CYCLES, "calls were made during the chaos"
  end

  # A graceful restart fails no call, a change included: keyholed answers every request it has read
  # and says goodbye, and the client sends the rest again on a new connection (PROTOCOL.md section 8,
  # rule 3). So every create succeeds, and each sub has exactly its one session: nothing lost,
  # nothing applied twice.
  def test_every_create_succeeds_and_is_applied_once
    created = {}
    failed = {}
    n = 0
    chaos(CYCLES, 200) do
      sub = "restart-#{n}"
      n += 1
      begin
        created[sub] = @client.create_session(sub)["id"]
      rescue Keyhole::Error => e
        failed[sub] = e
      end
    end
    assert_operator created.size + failed.size, :>, CYCLES, "creates were made during the chaos"
    assert_empty failed.map { |sub, e| "#{sub}: #{e.inspect} (sessions: #{@client.list_sessions(sub)['sessions'].size})" },
                 "every create succeeds across graceful restarts"
    created.each do |sub, id|
      ids = @client.list_sessions(sub)["sessions"].map { |s| s["id"] }
      assert_equal [id], ids, "#{sub}: exactly its one session"
    end
  end

  private

  # Runs the block in a loop from "chaos N MS" until the harness says the chaos is done.
  def chaos(cycles, ms)
    assert_equal({ "ok" => true }, @harness.command("chaos #{cycles} #{ms}"))
    done = nil
    watcher = Thread.new { done = @harness.lines.pop }
    yield while watcher.alive?
    assert_equal "done", done && done["chaos"], "chaos: #{done.inspect}"
  end
end

class OverloadedTest < Minitest::Test
  # Waiting out overloaded (an option, off by default) within the deadline: keyholed with a request
  # rate of 2 a second (a burst of 1) answers the second of two quick calls overloaded.
  def test_overloaded_is_surfaced_unless_asked_to_wait
    @harness = KeyholeTest::Harness.new(config_extra: "[server]\nrequests_per_second_per_uid = 2\nrequest_burst_per_uid = 1\n")
    @client = Keyhole::Client.new(socket: @harness.socket)
    @client.ping
    error = assert_raises(Keyhole::Error) { @client.ping }
    assert_equal "overloaded", error.code
    assert_operator error.retry_after_ms, :>, 0

    waiting = Keyhole::Client.new(socket: @harness.socket, retry_overloaded: true)
    assert_equal 1, waiting.ping["protocol"]
    assert_equal 1, waiting.ping["protocol"], "the second call waited and was answered"
    short = Keyhole::Client.new(socket: @harness.socket, retry_overloaded: true, timeout: 0.1)
    assert_equal "overloaded", assert_raises(Keyhole::Error) { short.ping && short.ping }.code,
                 "a wait past the deadline is not taken"
    waiting.close
    short.close
  ensure
    @client&.close
    @harness&.stop
  end
end
