# frozen_string_literal: true

# Keyhole's Ruby client: standard library only (socket, json). See README.md.
#
#   require "keyhole"
#   client = Keyhole::Client.new(socket: "/run/keyhole/keyhole.sock", timeout: 5.0)
#   client.get_session(token)  # => {"id" => ..., "sub" => ..., "user" => {...}}
module Keyhole
end

require_relative "keyhole/version"
require_relative "keyhole/error"
require_relative "keyhole/operations"
require_relative "keyhole/encoder"
require_relative "keyhole/fork_tracker"
require_relative "keyhole/helpers"
require_relative "keyhole/connection"
require_relative "keyhole/client"
require_relative "keyhole/middleware"
