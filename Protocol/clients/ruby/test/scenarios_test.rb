# frozen_string_literal: true

require_relative "test_helper"

# Every scenario of Protocol/vectors/client_scenarios.json, played by Protocol/testing/scenario_server.py
# as Protocol/testing/README.md says: one test each, named after the scenario.
class ScenariosTest < Minitest::Test
  DOC = JSON.parse(File.read(KeyholeTest::SCENARIOS_JSON))

  DOC["scenarios"].each do |scenario|
    define_method("test_scenario_#{scenario['name'].tr('-', '_')}") { play(scenario) }
  end

  def test_every_scenario_has_a_test
    names = DOC["scenarios"].map { |s| "test_scenario_#{s['name'].tr('-', '_')}" }
    assert_equal names.size, names.uniq.size
    names.each { |n| assert_includes self.class.public_instance_methods.map(&:to_s), n }
  end

  private

  def play(scenario)
    path = KeyholeTest.socket_path("scn")
    stderr = Tempfile.create("khrb-scenario")
    out_r, out_w = IO.pipe
    pid = Process.spawn("python3", KeyholeTest::SCENARIO_SERVER, path, scenario["name"], out: out_w, err: stderr.path)
    out_w.close
    assert_equal "ready", out_r.gets&.chomp, "scenario_server did not start: #{File.read(stderr.path)}"
    deadline_ms = scenario["deadline_ms"] || DOC["deadline_ms"]
    client = Keyhole::Client.new(socket: path, timeout: deadline_ms / 1000.0)
    calls = scenario["calls"]
    outcomes =
      if scenario["pipelined"]
        # All at once, on one connection, written in any order: the script reads every request
        # before it answers, and answers each by its own args or op.
        calls.map { |c| Thread.new { outcome(client, c) } }.map(&:value)
      else
        calls.map { |c| outcome(client, c) }
      end
    client.close
    status = KeyholeTest.wait_exit(pid)
    log = File.read(stderr.path)
    assert status&.success?, "scenario_server #{scenario['name']}: #{status.inspect} #{log}"
    calls.zip(outcomes).each_with_index { |(c, o), i| check(scenario["name"], i, c["expect"], o) }
  ensure
    out_r&.close
    File.unlink(stderr.path) if stderr
  end

  def outcome(client, call)
    [:ok, client.call(call["op"], call["args"])]
  rescue Keyhole::Error => e
    [:error, e]
  end

  def check(name, index, expect, (kind, value))
    where = "#{name} call #{index}"
    if expect.key?("ok")
      assert_equal :ok, kind, "#{where}: expected a result, got #{value.inspect}"
      assert_equal expect["ok"], value, where
    elsif expect.key?("ok_padding_bytes_at_least")
      assert_equal :ok, kind, "#{where}: expected a result, got #{value.inspect}"
      assert_kind_of String, value["padding"], where
      assert_operator value["padding"].bytesize, :>=, expect["ok_padding_bytes_at_least"], where
    else
      want = expect.fetch("error")
      assert_equal :error, kind, "#{where}: expected error #{want['code']}, got #{value.inspect}"
      assert_kind_of Keyhole::Error, value, where
      assert_equal want["code"], value.code, "#{where}: #{value.inspect}"
      assert_equal want["message"], value.message, where if want.key?("message")
      assert_equal want["retry_after_ms"], value.retry_after_ms, where if want.key?("retry_after_ms")
      client_class = { "unavailable" => Keyhole::Unavailable, "connection_lost" => Keyhole::ConnectionLost,
                       "timeout" => Keyhole::TimeoutError, "protocol_error" => Keyhole::ProtocolError }[want["code"]]
      assert_kind_of client_class, value, where if client_class
    end
  end
end
