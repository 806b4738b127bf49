# frozen_string_literal: true

require_relative "test_helper"

# The hand-written request encoder (lib/keyhole/encoder.rb) against JSON.generate: the same text, or
# the same refusal, for every kind of string and value; frames that decode to the request; and the
# strings going through a real keyholed and back (debug.echo).
class EncoderTest < Minitest::Test
  E = Keyhole::Encoder

  # Strings that must be escaped, or left to JSON.generate, or refused, beside plain ones.
  STRINGS = [
    "", "kh_#{'A' * 43}", "plain text ~!#$%&'()*+,-./:;<=>?@[]^_`{|}",
    "quote\"in", "back\\slash", "\\", "\"", "slash/", "tab\tin", "nl\nin", "cr\rin", "nul\0in",
    "\x01\x1f", "del\x7fin", "caf\u00e9", "\u2028\u2029", "\u{1f600}", "\ufeffbom",
    "\xff\xfe".dup.force_encoding(Encoding::UTF_8),                      # not UTF-8
    "\xed\xa0\x80".dup.force_encoding(Encoding::UTF_8),                  # a lone surrogate, as UTF-8 bytes
    "\xed\xa0\x80\xed\xb0\x80".dup.force_encoding(Encoding::UTF_8),      # a surrogate pair, as UTF-8 bytes
    "plain".b, "caf\u00e9".b, "\xff".b,                                  # binary
    "caf\u00e9".encode(Encoding::ISO_8859_1), "plain".encode(Encoding::ISO_8859_1),
    "plain".encode(Encoding::UTF_16LE), "caf\u00e9".encode(Encoding::UTF_16BE),
    "\u3042".encode(Encoding::EUC_JP), "plain".encode(Encoding::Shift_JIS)
  ].freeze

  def expected(value)
    JSON.generate(value)
  rescue JSON::GeneratorError, JSON::NestingError
    :refused
  end

  def encoded(args)
    E.args(args)
  rescue ArgumentError
    :refused
  end

  def assert_same_as_generate(args)
    assert_equal expected(args), encoded(args), args.inspect
  end

  def test_every_control_character_and_ascii_byte
    (0..0x7f).each do |byte|
      string = "a#{byte.chr}b"
      assert_same_as_generate({ "k" => string })
      assert_same_as_generate({ string => 1 })
    end
  end

  def test_strings_as_values_and_keys
    STRINGS.each do |string|
      assert_same_as_generate({ "session" => string })
      assert_same_as_generate({ "x" => 1, "y" => string, "z" => "after" })
      assert_same_as_generate({ string => "v" })
      assert_same_as_generate({ string.to_sym => "v" }) if string.valid_encoding?
    end
  end

  def test_other_values
    [nil, true, false, 0, -1, 2**70, -(2**64), 1.5, -0.0, 1e300, Float::NAN, Float::INFINITY, :sym,
     [], [1, "a\"b"], {}, { "nested" => { "deep" => ["\u00e9", nil] } }, Object.new].each do |value|
      assert_same_as_generate({ "v" => value })
      assert_same_as_generate({ "a" => "plain", "v" => value })
    end
  end

  def test_keys_of_other_kinds
    [{ 1 => "a" }, { nil => "a" }, { "a" => 1, a: 2 }, { s: "symbol key", "t" => nil }, {}].each do |args|
      assert_same_as_generate(args)
    end
  end

  def test_subclasses_take_json_generate
    string_class = Class.new(String)
    hash_class = Class.new(Hash)
    assert_same_as_generate({ "k" => string_class.new("plain") })
    assert_same_as_generate({ string_class.new("key") => "v" })
    assert_same_as_generate(hash_class[{ "k" => "v" }])
  end

  def test_too_deep_is_refused
    deep = (1..120).reduce("leaf") { |inner, _| { "d" => inner } }
    assert_equal :refused, encoded({ "a" => deep })
  end

  def test_string_args_equals_args_or_leaves_it
    STRINGS.each do |string|
      json = E.string_args(E::KEYS.fetch("session"), string)
      if json
        assert_equal E.args({ "session" => string }), json, string.inspect
        assert_equal JSON.generate({ "session" => string }), json, string.inspect
      else
        refute E.plain?(string), string.inspect
      end
    end
    assert_nil E.string_args(E::KEYS.fetch("session"), :kh_symbol)
    assert_nil E.string_args(E::KEYS.fetch("session"), nil)
  end

  def test_frames_decode_to_the_request
    ops = ["session.get", "debug.echo", "not.an.op", "quote\"op", "caf\u00e9.op", "ctl\u0001op"]
    sizes = [0, 200, 300, 70_000, 1_000_000] # lengths under 256, under 65536 and over
    ops.product(sizes, [1, 255, 256, 65_536, 2**40]).each do |op, size, id|
      args = { "session" => "kh_#{'x' * size}", "n" => size }
      frame = E.frame(id, E.head(op), E.args(args))
      length = frame.unpack1("N")
      assert_equal frame.bytesize - 4, length
      body = frame.byteslice(4, length).force_encoding(Encoding::UTF_8)
      assert_equal({ "v" => Keyhole::PROTOCOL, "id" => id, "op" => op, "args" => args }, JSON.parse(body))
      assert_equal JSON.generate({ "v" => Keyhole::PROTOCOL, "id" => id, "op" => op, "args" => args }), body
    end
  end

  def test_an_op_that_is_not_utf8_is_refused
    assert_raises(ArgumentError) { E.head("\xff".dup.force_encoding(Encoding::UTF_8)) }
  end

  def test_size_limit
    head = E.head("debug.echo")
    room = E::MAX_REQUEST - (JSON.generate({ "v" => 1, "id" => 2**64 - 1 }).bytesize - 1 + head.bytesize + 1)
    E.check_size(head, "x" * room)
    assert_raises(ArgumentError) { E.check_size(head, "x" * (room + 1)) }
  end

  def test_strings_through_keyholed
    client = Keyhole::Client.new(socket: KeyholeTest::Harness.shared.socket)
    STRINGS.select { |s| expected({ "s" => s }) != :refused }.each do |string|
      sent = { "s" => string, string => 1, "n" => -7, "t" => true, "z" => nil }
      echoed = client.call("debug.echo", sent)
      want = JSON.parse(JSON.generate(sent))
      assert_equal want, echoed, string.inspect
    end
    assert_raises(ArgumentError) { client.call("debug.echo", { "s" => "\xff".dup.force_encoding(Encoding::UTF_8) }) }
    assert_raises(Keyhole::Error) { client.get_session("kh_not\"a\\token\u00e9") }
  ensure
    client&.close
  end
end
