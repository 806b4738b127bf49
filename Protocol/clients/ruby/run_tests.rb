# frozen_string_literal: true

# Runs every test of the Ruby client: ruby Protocol/clients/ruby/run_tests.rb (needs $KEYHOLED).
Dir[File.join(__dir__, "test", "**", "*_test.rb")].sort.each { |f| require f }
