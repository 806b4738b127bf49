# frozen_string_literal: true

module Keyhole
  # Which fork of the process this is, for a Client to find out that it runs in a child and must not
  # use its parent's connection (internal).
  #
  # Comparing Process.pid on every call would cost a getpid system call each time: Ruby does not
  # cache it. Ruby 3.1 gave forking its hook instead, Process._fork, which Kernel#fork, Process.fork
  # and IO.popen("-") all go through; the child counts one more generation there. Process.daemon
  # does not go through it, so it is hooked too: its parent exits at once, but a call another thread
  # had under way (reading for everyone) does not exist in the daemon, which must start afresh.
  module ForkTracker
    @generation = 0

    class << self
      # The count of forks between the first process and this one.
      attr_reader :generation

      # Called in the child of a fork.
      def forked!
        @generation += 1
      end
    end

    # Prepended to Process's singleton class: runs in both processes after every fork.
    module Hook
      def _fork
        pid = super
        ForkTracker.forked! if pid.zero?
        pid
      end

      # Returns only in the daemon (the parent exits).
      def daemon(*args)
        result = super
        ForkTracker.forked!
        result
      end
    end

    Process.singleton_class.prepend(Hook)
  end
end
