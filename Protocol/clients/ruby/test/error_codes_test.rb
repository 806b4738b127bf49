# frozen_string_literal: true

require_relative "test_helper"

# The client's list of keyholed's codes against PROTOCOL.md section 6's table, and a code from that
# list kept as it is while one outside it is reported as internal.
class ErrorCodesTest < Minitest::Test
  PROTOCOL_MD = File.join(KeyholeTest::PROTOCOL_DIR, "PROTOCOL.md")

  # The first column of section 6's table, in its order.
  def self.section_6_codes
    text = File.read(PROTOCOL_MD)
    section = text[/^## 6\. Error codes\n(.*?)^## 7\./m, 1] or raise "PROTOCOL.md has no section 6"
    section.scan(/^\| `([a-z_]+)` \|/).flatten
  end

  def test_server_codes_equal_protocol_section_6
    codes = self.class.section_6_codes
    assert_operator codes.size, :>=, 30, "section 6's table was read"
    assert_equal codes, Keyhole::Error::SERVER_CODES
    assert_empty codes & Keyhole::Error::CLIENT_CODES, "the client's own codes are not keyholed's"
  end

  def test_known_codes_are_kept_and_unknown_ones_are_internal
    %w[state_invalid apple_authorization_refused].each do |code|
      error = Keyhole::Error.from_wire({ "code" => code, "message" => "m" })
      assert_equal code, error.code
      assert_equal code, error.received_code
      assert_equal "m", error.message
    end
    error = Keyhole::Error.from_wire({ "code" => "state_frobnicated", "message" => "m" })
    assert_equal "internal", error.code
    assert_equal "state_frobnicated", error.received_code
  end
end
