# frozen_string_literal: true

require "json"

module Keyhole
  # Writes request frames (internal). The envelope is fixed ({"v", "id", "op", "args"}), so it is put
  # together by hand, and so are args made of plain strings, integers, true, false and nil: a string
  # goes in as it is only when it is ASCII with no control character, quote or backslash (nor DEL),
  # which JSON.generate copies unchanged too. Anything else (another string, a float, a nested object
  # or array, a key neither a String nor a Symbol, a subclass) sends the whole args to JSON.generate,
  # so every value is escaped, and refused, exactly as JSON.generate does it. The tests check both
  # paths against it.
  #
  # Why by hand: JSON.generate sets up a generator state with its options on every call, which costs
  # more than writing a session.get's few members.
  module Encoder
    # What JSON.generate would not copy as it is (or this file leaves to it: DEL).
    UNPLAIN = /[\x00-\x1f"\\\x7f]/
    # The frame's four length bytes (filled in by #frame) and the envelope up to the id.
    PREFIX = "\0\0\0\0{\"v\":#{PROTOCOL},\"id\":".b.freeze
    # The most digits an id has (ids count requests on one connection from 1: at most 2**64 - 1).
    ID_DIGITS = 20
    # The largest request keyholed takes (PROTOCOL.md), and what its op member and args may take.
    MAX_REQUEST = 16 * 1024 * 1024
    ROOM = MAX_REQUEST - (PREFIX.bytesize - 4 + ID_DIGITS + 1)
    # The "op" member of each known operation, written once.
    HEADS = OPERATIONS.keys.to_h { |op| [op, ",\"op\":#{JSON.generate(op)},\"args\":".freeze] }.freeze
    # The helpers' argument names, written once (any other plain key is checked and written per call).
    KEYS = %w[
      session id sub issuer token audience nonce ttl_s idle_s data email name identity_token
      authorization_code client_id user payload target_team_id transfer_sub redirect_uri scope
      return_to form cookie
    ].to_h { |key| [key, "\"#{key}\":".freeze] }.freeze

    module_function

    # What goes between the id and the args: the op member (ArgumentError for an op that is not
    # valid UTF-8).
    def head(op)
      HEADS[op] || ",\"op\":#{generate(op)},\"args\":"
    end

    # The JSON text of +args+ (a Hash). ArgumentError when it cannot be sent as JSON.
    def args(args)
      return generate(args) unless args.instance_of?(Hash)

      out = nil
      args.each_pair do |key, value|
        key = key.name if key.instance_of?(Symbol)
        return generate(args) unless key.instance_of?(String)

        name = KEYS[key]
        unless name
          return generate(args) unless plain?(key)

          name = "\"#{key}\":"
        end
        if value.instance_of?(String)
          return generate(args) unless plain?(value)

          value = "\"#{value}\""
        elsif value.nil?
          value = "null"
        elsif value.instance_of?(Integer) || true.equal?(value) || false.equal?(value)
          value = value.to_s
        else
          return generate(args)
        end
        if out
          out << "," << name << value
        else
          out = "{#{name}#{value}"
        end
      end
      out ? out << "}" : "{}"
    end

    # ArgumentError unless a frame of +head+ and +args_json+ fits in MAX_REQUEST whatever its id.
    def check_size(head, args_json)
      return if head.bytesize + args_json.bytesize <= ROOM

      raise ArgumentError, "request larger than #{MAX_REQUEST} bytes"
    end

    # The frame of request +id+: its length, then the envelope around +head+ and +args_json+.
    def frame(id, head, args_json)
      frame = "#{PREFIX}#{id}#{head}#{args_json}}"
      n = frame.bytesize - 4
      if n < 0x100
        frame.setbyte(3, n)
      else
        frame.setbyte(0, n >> 24)
        frame.setbyte(1, (n >> 16) & 0xff)
        frame.setbyte(2, (n >> 8) & 0xff)
        frame.setbyte(3, n & 0xff)
      end
      frame
    end

    # The args of a helper that sends one string: the same JSON text as #args({key => value}), or
    # nil when +value+ is not a plain string (then #args decides). +name+: KEYS[key].
    def string_args(name, value)
      "{#{name}\"#{value}\"}" if value.instance_of?(String) && plain?(value)
    end

    # True when JSON.generate writes +string+ as its own bytes between quotes. (ascii_only? is false
    # for a string not valid in its encoding, or in one that is not ASCII-compatible.)
    def plain?(string)
      string.ascii_only? && !string.match?(UNPLAIN)
    end

    # JSON.generate's text for +value+; ArgumentError when it refuses it.
    def generate(value)
      JSON.generate(value)
    rescue JSON::GeneratorError, JSON::NestingError => e
      raise ArgumentError, "args cannot be sent as JSON: #{e.message}"
    end
  end
end
