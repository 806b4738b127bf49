# frozen_string_literal: true

# rackup example/config.ru   (KEYHOLE_SOCKET names keyholed's socket)
require_relative "app"

run KeyholeExample.app(Keyhole::Client.new)
