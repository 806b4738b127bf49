# frozen_string_literal: true

require_relative "test_helper"

# The embedded safe-to-repeat table against Protocol/ops.json, and a helper for every non-debug operation.
class OpsTest < Minitest::Test
  OPS = JSON.parse(File.read(KeyholeTest::OPS_JSON))

  def test_embedded_table_equals_ops_json
    assert_equal OPS["protocol"], Keyhole::PROTOCOL
    from_file = OPS["operations"].to_h do |o|
      [o["op"], { group: o["group"], safe_to_repeat: o["safe_to_repeat"], debug: o["debug"] }]
    end
    assert_equal from_file.keys.sort, Keyhole::OPERATIONS.keys.sort
    from_file.each do |op, entry|
      assert_equal entry, Keyhole::OPERATIONS[op], op
      assert_equal entry[:safe_to_repeat], Keyhole.safe_to_repeat?(op), op
    end
  end

  def test_unknown_operation_is_not_safe_to_repeat
    refute Keyhole.safe_to_repeat?("session.frobnicate")
  end

  def test_every_non_debug_operation_has_a_helper
    wanted = OPS["operations"].reject { |o| o["debug"] }.map { |o| o["op"] }
    assert_equal wanted.sort, Keyhole::Helpers::METHODS.keys.sort
    Keyhole::Helpers::METHODS.each_value do |name|
      assert Keyhole::Client.public_method_defined?(name), "Keyhole::Client##{name}"
    end
  end
end
