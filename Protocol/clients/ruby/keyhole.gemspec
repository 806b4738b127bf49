# frozen_string_literal: true

require_relative "lib/keyhole/version"

Gem::Specification.new do |spec|
  spec.name = "keyhole"
  spec.version = Keyhole::VERSION
  spec.summary = "Client for keyholed, the local authentication daemon, with Rack middleware"
  spec.description = "Talks to keyholed over its Unix socket (standard library only): pipelined, " \
                     "thread-safe, reconnecting across restarts without repeating changes; Rack " \
                     "middleware for Rails and Sinatra."
  spec.authors = ["Keyhole"]
  spec.files = Dir["lib/**/*.rb"] + ["README.md", "keyhole.gemspec"]
  spec.require_paths = ["lib"]
  spec.required_ruby_version = ">= 3.1"
  spec.metadata["rubygems_mfa_required"] = "true"
end
