# frozen_string_literal: true

module Keyhole
  # The one error every call raises. +code+ is one of keyholed's codes (PROTOCOL.md section 6, a code
  # this client does not know reported as "internal") or one of the client's own codes (section 8):
  # "unavailable", "connection_lost", "timeout", "protocol_error", each also raised as its own
  # subclass (Keyhole::Unavailable, Keyhole::ConnectionLost, Keyhole::TimeoutError,
  # Keyhole::ProtocolError) so that either `rescue` style works.
  class Error < StandardError
    # keyholed's codes, PROTOCOL.md section 6.
    SERVER_CODES = %w[
      bad_frame frame_too_large bad_request unknown_op unsupported_version permission_denied
      overloaded shutting_down internal token_malformed token_alg_not_allowed token_key_unknown
      token_signature_invalid token_expired token_not_yet_valid token_issuer_unknown
      token_audience_invalid token_nonce_mismatch token_claim_invalid keys_unavailable
      session_not_found user_not_found storage_unavailable data_too_large upstream_rejected
      upstream_unavailable not_configured state_invalid apple_authorization_refused config_invalid
    ].freeze
    # The client's own codes, PROTOCOL.md section 8; keyholed never sends them.
    CLIENT_CODES = %w[unavailable connection_lost timeout protocol_error].freeze

    # The error code (a String).
    attr_reader :code
    # The server's hint, in milliseconds, of when to retry (Integer), or nil.
    attr_reader :retry_after_ms
    # Apple's OAuth error with "upstream_rejected" (e.g. "invalid_grant"), else nil.
    attr_reader :apple_error
    # The code as keyholed sent it; differs from +code+ only for a code this client does not know.
    attr_reader :received_code

    def initialize(code, message = nil, retry_after_ms: nil, apple_error: nil, received_code: nil)
      @code = code
      @retry_after_ms = retry_after_ms
      @apple_error = apple_error
      @received_code = received_code || code
      super(message || code)
    end

    # The error of a response's "error" object. A code that is not keyholed's is "internal".
    def self.from_wire(error)
      received = error["code"]
      code = SERVER_CODES.include?(received) ? received : "internal"
      retry_after = error["retry_after_ms"]
      apple = error["apple_error"]
      new(code, error["message"].is_a?(String) ? error["message"] : received,
          retry_after_ms: retry_after.is_a?(Integer) ? retry_after : nil,
          apple_error: apple.is_a?(String) ? apple : nil,
          received_code: received)
    end

    def inspect
      "#<#{self.class.name} code=#{code}#{retry_after_ms ? " retry_after_ms=#{retry_after_ms}" : ''}: #{message}>"
    end
  end

  # keyholed could not be reached before the deadline; the request was never sent.
  class Unavailable < Error
    def initialize(message) = super("unavailable", message)
  end

  # The connection ended after the request was written and before its answer, without keyholed's
  # goodbye (which would have said it was never read), and the operation is not safe to repeat (or
  # its one re-send was lost too): its outcome is unknown.
  class ConnectionLost < Error
    def initialize(message) = super("connection_lost", message)
  end

  # The call's deadline passed. The connection stays open; a late answer is dropped.
  class TimeoutError < Error
    def initialize(message) = super("timeout", message)
  end

  # keyholed's answer broke the protocol; the client closed the connection.
  class ProtocolError < Error
    def initialize(message) = super("protocol_error", message)
  end
end
