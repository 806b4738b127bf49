# frozen_string_literal: true

module Keyhole
  # The client's version (the gem's).
  VERSION = "0.1.0"
  # The Keyhole protocol version this client speaks (PROTOCOL.md).
  PROTOCOL = 1
end
