# frozen_string_literal: true

require "json"
require "socket"

module Keyhole
  # A client of keyholed: one connection (opened on the first call, reopened as needed), shared by
  # every thread that uses the client, with requests pipelined on it and answers matched by id.
  #
  #   client = Keyhole::Client.new                     # $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock
  #   session = client.get_session(token)              # => Hash with string keys
  #   client.call("session.list", { "sub" => "alice" }) # any operation
  #
  # Every failure is a Keyhole::Error (see error.rb); PROTOCOL.md section 8 says when a request is
  # sent again. Safe to share between threads; after fork, the child opens its own connection.
  class Client
    include Helpers

    DEFAULT_SOCKET = "/run/keyhole/keyhole.sock"
    MAX_REQUEST = Encoder::MAX_REQUEST
    BACKOFF_FIRST = 0.01
    BACKOFF_MAX = 0.5

    # The socket path in use.
    attr_reader :socket_path
    # The per-call deadline in seconds.
    attr_reader :timeout

    # The monotonic clock every deadline is measured on, in seconds.
    def self.now
      Process.clock_gettime(Process::CLOCK_MONOTONIC)
    end

    # +socket+: the socket path; default $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock.
    # +timeout+: each call's deadline in seconds (connecting, reconnecting, writing and the answer).
    # +retry_overloaded+: when true, a call answered "overloaded" with retry_after_ms waits that long
    # and tries again if that still fits in its deadline; off by default (the error reaches the caller).
    def initialize(socket: nil, timeout: 5.0, retry_overloaded: false)
      env = ENV["KEYHOLE_SOCKET"]
      @socket_path = socket || (env && !env.empty? ? env : DEFAULT_SOCKET)
      raise ArgumentError, "timeout must be a positive number of seconds" unless timeout.is_a?(Numeric) && timeout.positive?

      @timeout = timeout.to_f
      @retry_overloaded = retry_overloaded
      @address = Socket.sockaddr_un(@socket_path) # ArgumentError now for a path too long
      @lock = Mutex.new
      @changed = ConditionVariable.new
      @connection = nil
      @connecting = false
      @closed = false
    end

    # Sends +op+ with +args+ (a Hash, keys strings or symbols) and answers the result object (a Hash
    # with string keys), or raises Keyhole::Error.
    def call(op, args = {})
      op = op.to_s
      args = {} if args.nil?
      raise ArgumentError, "args must be a Hash" unless args.is_a?(Hash)

      perform(op, Encoder.head(op), Encoder.args(args)) # ArgumentError before anything is sent
    end

    # Closes the connection. Calls still waiting fail with connection_lost; later calls raise
    # unavailable.
    def close
      connection = @lock.synchronize do
        @closed = true
        c = @connection
        @connection = nil
        @changed.broadcast
        c
      end
      connection&.close(ConnectionLost.new("the client was closed while the call waited"))
      nil
    end

    def inspect
      "#<#{self.class.name} socket=#{@socket_path} timeout=#{@timeout}>"
    end

    private

    # Sends +op+ (+head+ and +args_json+ from Encoder) until it is answered, or it fails, by
    # PROTOCOL.md section 8.
    def perform(op, head, args_json)
      Encoder.check_size(head, args_json)
      deadline = Client.now + @timeout
      resent = false   # the one re-send of a written request has been used
      written = false  # some attempt of this call went out, so its effect may be unknown
      unsent = 0       # connections that ended before this call's request went out
      while true # rubocop:disable Style/InfiniteLoop -- a plain loop: no block on every call's path
        connection = connection_for(deadline, written, op)
        kind, value = connection.request(head, args_json, deadline)
        case kind
        when :answer
          return value["result"] if value["ok"]

          error = Error.from_wire(value["error"])
          if error.code == "shutting_down"
            # keyholed did not complete it; nothing more goes on that connection (rule 3).
            connection.retire
            if !resent && Keyhole.safe_to_repeat?(op)
              resent = true
              written = true
              next
            end
          end
          next if overloaded_wait(error, deadline)

          raise error
        when :not_sent
          # Rule 1: it never reached keyholed; connection_for opens a new connection. So too after
          # keyholed's goodbye (rule 3), whatever the operation: the request was never read, so this
          # is not the one re-send, and only the deadline bounds how many goodbyes a call may meet.
          # A connection that keeps ending before a request goes out (or is read) counts as a
          # failed attempt: back off.
          unsent += 1
          backoff(deadline, unsent, op, written) if unsent > 1
          next
        when :lost
          written = true
          safe = Keyhole.safe_to_repeat?(op)
          if safe && !resent
            resent = true
            next
          end
          raise ConnectionLost, lost_message(op, safe)
        when :failed
          next if overloaded_wait(value, deadline)

          raise value
        when :timeout
          raise TimeoutError, "#{op}: no answer from keyholed within #{@timeout} s" +
                              (value || written ? " (it may have taken effect)" : " (it was not sent)")
        end
      end
    end

    # Waits out an overloaded answer when the caller asked for it and the wait fits the deadline.
    def overloaded_wait(error, deadline)
      return false unless @retry_overloaded && error.code == "overloaded" && error.retry_after_ms

      wait = error.retry_after_ms / 1000.0
      return false if Client.now + wait >= deadline

      sleep(wait)
      true
    end

    def lost_message(op, safe)
      if safe
        "#{op}: the connection to keyholed ended before its answer, twice (sent again once); the outcome is unknown"
      else
        "#{op}: the connection to keyholed ended before its answer; #{op} is not safe to send again, so its outcome is unknown"
      end
    end

    def backoff(deadline, attempt, op, written)
      remaining = deadline - Client.now
      raise unreachable(op, written, nil) if remaining <= 0

      sleep([BACKOFF_FIRST * (2**[attempt - 2, 6].min), BACKOFF_MAX, remaining].min)
    end

    # The open connection, or a new one: attempts back off (doubling from 10 ms, at most 500 ms)
    # until the deadline. The open one is taken without the lock: one that is closed or ends just
    # after is found out by Connection#request, which answers :not_sent (rule 1), and the call
    # comes back here.
    def connection_for(deadline, written, op)
      current = @connection
      return current if current && !@closed && current.generation == ForkTracker.generation && current.usable?

      open_connection(deadline, written, op)
    end

    # The open connection, once the one in use is found unusable (or there is none yet): a new one
    # unless another thread opened it meanwhile.
    def open_connection(deadline, written, op)
      delay = BACKOFF_FIRST
      last_error = nil
      loop do
        @lock.synchronize do
          loop do
            raise Unavailable, "#{op}: the client is closed" if @closed

            current = @connection
            if current && current.generation != ForkTracker.generation
              @connection = nil
              current.abandon
              current = nil
            end
            return current if current&.usable?
            break unless @connecting

            remaining = deadline - Client.now
            raise unreachable(op, written, last_error) if remaining <= 0

            @changed.wait(@lock, remaining)
          end
          @connecting = true
        end
        socket = nil
        fresh = nil
        begin
          socket, last_error = connect
        ensure
          @lock.synchronize do
            @connecting = false
            @changed.broadcast
            if socket && @closed
              socket.close
            elsif socket
              old = @connection
              fresh = @connection = Connection.new(socket)
              old&.retire
            end
          end
        end
        return fresh if fresh

        remaining = deadline - Client.now
        raise unreachable(op, written, last_error) if remaining <= 0

        sleep([delay, remaining].min)
        delay = [delay * 2, BACKOFF_MAX].min
      end
    end

    def connect
      socket = Socket.new(Socket::AF_UNIX, Socket::SOCK_STREAM)
      begin
        socket.connect_nonblock(@address)
        [socket, nil]
      rescue IO::WaitWritable, SystemCallError => e
        # EAGAIN: the listen backlog is full (a Unix socket does not connect in the background).
        socket.close
        [nil, e]
      end
    end

    def unreachable(op, written, error)
      reason = error ? " (#{error.message})" : ""
      if written
        ConnectionLost.new("#{op}: the connection to keyholed ended before its answer and no new " \
                           "connection could be opened within #{@timeout} s#{reason}; the outcome is unknown")
      else
        Unavailable.new("#{op}: keyholed could not be reached at #{@socket_path} within #{@timeout} s#{reason}")
      end
    end
  end
end
