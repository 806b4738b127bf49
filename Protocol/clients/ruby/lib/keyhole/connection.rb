# frozen_string_literal: true

require "io/wait"
require "json"
require "socket"

module Keyhole
  # One connection to keyholed, shared by every thread of a Client (internal; use Keyhole::Client).
  #
  # Requests are pipelined: a thread registers its id, writes its frame and waits for the answer
  # with that id. There is no reader thread: the first waiting thread that finds nobody reading
  # becomes the reader, reads frames and hands each answer to the thread waiting for its id, until
  # its own answer is in (or its deadline passes); then the next waiting thread takes over. At depth
  # 1 a call is therefore a write and a read in the caller's own thread, with no thread switch.
  #
  # #request answers a pair [kind, value], for the Client to apply PROTOCOL.md section 8:
  # - [:answer, response]  the response object (ok or error) with this id
  # - [:not_sent, nil]     not a byte of the request went out: the connection was over (rule 1);
  #                        or keyholed's goodbye (a null-id shutting_down) said that it was never
  #                        read, whether it was written or not (rule 3)
  # - [:lost, nil]         written (in part or whole), and the connection ended before its answer
  # - [:failed, error]     the connection failed as a whole: protocol_error, or keyholed's error
  #                        with a null id about the connection (rule 4), for a call it left
  #                        unanswered (or could not send: refused on connect)
  # - [:timeout, written]  the deadline passed; +written+ tells whether any byte of it went out
  class Connection
    MAX_RESPONSE = 16 * 1024 * 1024
    # What one read asks for. Not more: Ruby allocates a string of this size for every read, and a
    # 64 KiB one cost more than the rest of a read (malloc's consolidation, the heap grown and trimmed).
    READ_CHUNK = 16 * 1024
    # What is read of a connection found closed on a write, for the error keyholed left on it.
    DRAIN_LIMIT = 1024 * 1024
    EMPTY = "".b.freeze

    # One request waiting for its answer. +state+: :pending, :answered, :lost, :failed, :unread
    # (keyholed's goodbye said it was never read).
    Waiter = Struct.new(:state, :value)

    # The ForkTracker generation of the process that opened it: a forked child must not use its
    # parent's connection.
    attr_reader :generation

    def initialize(socket)
      @socket = socket
      @generation = ForkTracker.generation
      @mu = Mutex.new
      @cv = ConditionVariable.new
      @waiters = {}
      @reader = nil     # the waiter of the call whose thread reads for everyone, if any
      @writing = false
      @over = false     # ended or failed: nothing more is read or written
      @retired = false  # no new requests (shutting_down, a torn write); answers still read
      @error = nil      # keyholed's error with a null id: the calls it leaves unanswered fail with it
      @goodbye = false  # keyholed said goodbye: every request it left unanswered was never read
      @buffer = EMPTY # frozen: replaced, never appended to, while empty (#take_frames)
      @next_id = 0      # ids are unique on the connection, which is where answers are matched
    end

    # True while new requests may be sent on it. Read without the lock: a connection that ends just
    # after is found out by #request, which answers :not_sent.
    def usable?
      !@over && !@retired
    end

    # Sends a request (its op member +head+ and +args_json+, from Encoder, checked for size) with the
    # connection's next id, and waits for its answer until +deadline+ (a monotonic time in seconds).
    def request(head, args_json, deadline)
      waiter = Waiter.new(:pending, nil)
      id = nil
      @mu.synchronize do
        return [:not_sent, nil] if @over || @retired

        id = @next_id += 1
        @waiters[id] = waiter
        while @writing
          remaining = deadline - Client.now
          if remaining <= 0
            forget(id)
            return [:timeout, false]
          end
          @cv.wait(@mu, remaining)
          if @over || @retired
            forget(id)
            return [:not_sent, nil]
          end
        end
        @writing = true
      end
      begin
        outcome = write_frame(Encoder.frame(id, head, args_json), deadline)
      rescue Exception # rubocop:disable Lint/RescueException -- Timeout.timeout, Thread#raise
        # Interrupted mid-write: part of the frame may be on the stream, so no request may follow.
        @mu.synchronize do
          @writing = false
          @retired = true
          @cv.broadcast
          forget(id)
        end
        raise
      end
      drain = false
      reading = false
      @mu.synchronize do
        @writing = false
        @cv.broadcast
        case outcome
        when :ok
          # With nobody reading (depth 1), this thread takes the reading over now rather than in a
          # round of its own in #wait.
          unless @reader || @over || waiter.state != :pending
            @reader = waiter
            reading = true
          end
        when :not_sent, :broken
          # The connection is over (EPIPE, ECONNRESET): no new request goes on it.
          @waiters.delete(id)
          @retired = true
          drain = claim_drain(waiter, deadline)
        when :timeout_unsent
          forget(id)
          return [:timeout, false]
        when :timeout_partial
          # The stream now holds part of a frame: no further request can follow it. Requests already
          # written on it may still be answered, so it stays open for them.
          forget(id)
          @retired = true
          close_if_idle
          return [:timeout, true]
        end
      end
      return closed_on_write(outcome, drain) unless outcome == :ok

      begin
        wait(id, waiter, deadline, reading)
      rescue Exception # rubocop:disable Lint/RescueException -- Timeout.timeout, Thread#raise
        @mu.synchronize { forget(id) }
        raise
      end
    end

    # No new requests on this connection; it is closed once no request waits on it.
    def retire
      @mu.synchronize do
        @retired = true
        close_if_idle
      end
    end

    # Ends the connection: every waiting request fails with +error+ (or counts as lost when nil).
    def close(error = nil)
      @mu.synchronize { end_connection(error) }
    end

    # Drops a connection inherited across fork without touching the parent's: only this process's
    # descriptor is closed.
    def abandon
      @mu.synchronize do
        @over = true
        @waiters.clear
        begin
          @socket.close
        rescue IOError
          nil
        end
      end
    end

    private

    # Called with @mu held, after a write found the connection closed. keyholed may have said why
    # before it closed it (overloaded on connect): a reader at work reads that, and the end of
    # stream right after it; with no reader, this thread takes the role to read what is left. True
    # when it did.
    def claim_drain(waiter, deadline)
      while @reader && !@over && @error.nil?
        remaining = deadline - Client.now
        return false if remaining <= 0

        @cv.wait(@mu, remaining)
      end
      return false if @reader || @over || @error

      @reader = waiter # no longer in @waiters: no answer can end its reading (#dispatch)
      true
    end

    # After a write found the connection closed: once the frames keyholed left are read, its
    # goodbye means this call was never read, even when part of it went out (:not_sent, rule 3:
    # keyholed had stopped reading before it said goodbye), and its error with a null id fails this
    # call (rule 4). Otherwise :not_sent (rule 1), or :lost when part of the frame went out (rule 2).
    def closed_on_write(outcome, drain)
      drain_closed if drain
      @mu.synchronize do
        @reader = nil if drain
        @cv.broadcast
        close_if_idle
        return [:not_sent, nil] if @goodbye
        return [:failed, @error] if @error
      end
      outcome == :broken ? [:lost, nil] : [:not_sent, nil]
    end

    # Reads, without waiting, what a peer that closed the connection left on it (at most
    # DRAIN_LIMIT bytes), and hands out its frames.
    def drain_closed
      read = 0
      while read < DRAIN_LIMIT
        data = @socket.read_nonblock(READ_CHUNK, exception: false)
        break if data == :wait_readable

        if data.nil?
          @mu.synchronize { end_connection(nil) }
          break
        end
        read += data.bytesize
        take_frames(data)
        break if @mu.synchronize { @over }
      end
    rescue SystemCallError, IOError
      @mu.synchronize { end_connection(nil) unless @over }
    end

    # Waits for the answer of the request +id+, reading for everyone while nobody else does.
    # +reading+: this thread already holds the reader's role.
    def wait(id, waiter, deadline, reading)
      while true # rubocop:disable Style/InfiniteLoop -- a plain loop: no block on every call's path
        unless reading
          @mu.synchronize do
            while true # rubocop:disable Style/InfiniteLoop
              return finish(waiter) unless waiter.state == :pending

              remaining = deadline - Client.now
              if remaining <= 0
                forget(id)
                return [:timeout, true]
              end
              break unless @reader

              @cv.wait(@mu, remaining)
            end
            @reader = waiter
          end
        end
        reading = false
        begin
          read_until(waiter, deadline)
        ensure
          # #dispatch hands the reading over itself when it delivers this call's answer last. Read
          # without the lock: only this thread makes this waiter the reader, so when @reader is
          # another (or nil), this thread no longer reads.
          release(waiter) if @reader.equal?(waiter)
        end
        return finish(waiter) unless waiter.state == :pending
      end
    end

    # Ends this thread's reading (+waiter+ its call's): the next waiting thread takes over.
    def release(waiter)
      @mu.synchronize do
        @reader = nil if @reader.equal?(waiter)
        @cv.broadcast
        close_if_idle
      end
    end

    def finish(waiter)
      case waiter.state
      when :answered then [:answer, waiter.value]
      when :lost then [:lost, waiter.value]
      when :unread then [:not_sent, nil]
      else [:failed, waiter.value]
      end
    end

    # Called with @mu held.
    def forget(id)
      @waiters.delete(id)
      close_if_idle
    end

    # Called with @mu held.
    def close_if_idle
      return unless @retired && @waiters.empty? && !@over && !@reader && !@writing

      end_connection(nil)
    end

    # Called with @mu held. Fails every waiting request and closes the socket: with +error+, else
    # as never read after keyholed's goodbye (rule 3), else with keyholed's error with a null id if
    # it sent one (rule 4), else as lost.
    def end_connection(error)
      @over = true
      error ||= @error unless @goodbye
      state = if error then :failed
              elsif @goodbye then :unread
              else :lost
              end
      @waiters.each_value do |w|
        w.state = state
        w.value = error
      end
      @waiters.clear
      @cv.broadcast
      begin
        @socket.close
      rescue IOError
        nil
      end
    end

    def write_frame(frame, deadline)
      sent = 0
      total = frame.bytesize
      while sent < total
        chunk = sent.zero? ? frame : frame.byteslice(sent, total - sent)
        n = @socket.write_nonblock(chunk, exception: false)
        if n == :wait_writable
          remaining = deadline - Client.now
          return(sent.zero? ? :timeout_unsent : :timeout_partial) if remaining <= 0

          @socket.wait_writable(remaining)
        else
          sent += n
        end
      end
      :ok
    rescue SystemCallError, IOError
      sent.zero? ? :not_sent : :broken
    end

    # The reader's loop: reads and dispatches answers until +waiter+'s own is in, the connection is
    # over, or the deadline passes.
    def read_until(waiter, deadline)
      while waiter.state == :pending
        data = @socket.read_nonblock(READ_CHUNK, exception: false)
        if data == :wait_readable
          remaining = deadline - Client.now
          return if remaining <= 0

          @socket.wait_readable(remaining)
        elsif data.nil?
          @mu.synchronize { end_connection(nil) }
        else
          take_frames(data)
        end
      end
    rescue SystemCallError, IOError
      # ECONNRESET, another failure, or the socket closed under us (Client#close): it is over.
      @mu.synchronize { end_connection(nil) unless @over }
    end

    # Adds +data+ (a string just read, this method's to keep) to the buffer and dispatches every
    # complete frame in it. A length is checked as soon as its four bytes are in, before any more of
    # the frame is waited for.
    def take_frames(data)
      buffer = @buffer.empty? ? data : @buffer << data # the usual case: nothing left over, no copy
      offset = 0
      size = buffer.bytesize
      while size - offset >= 4
        length = buffer.unpack1("N", offset: offset)
        if length.zero? || length > MAX_RESPONSE
          return protocol_error("keyholed sent a frame length of #{length} (allowed: 1 to #{MAX_RESPONSE})")
        end
        break if size - offset - 4 < length

        payload = buffer.byteslice(offset + 4, length)
        offset += 4 + length
        if offset == size
          # The last frame read: the buffer is settled first, as #dispatch may hand the reading over.
          @buffer = EMPTY
          dispatch(payload, true)
          return
        end
        return unless dispatch(payload, false)
      end
      @buffer = offset.zero? ? buffer : buffer.byteslice(offset, size - offset)
    end

    # Hands one answer to its waiter. False when the connection is over (keyholed's goodbye ends it).
    # +last+: nothing follows it in the buffer, so when the answer is the reader's own, the reading is
    # handed over at once.
    def dispatch(payload, last)
      payload.force_encoding(Encoding::UTF_8)
      unless payload.valid_encoding?
        protocol_error("keyholed sent a payload that is not UTF-8")
        return false
      end
      begin
        response = JSON::Parser.new(payload).parse # JSON.parse without its options hashes
      rescue JSON::ParserError
        protocol_error("keyholed sent a payload that is not JSON")
        return false
      end
      problem = response_problem(response)
      if problem
        protocol_error("keyholed sent #{problem}")
        return false
      end
      id = response["id"]
      @mu.synchronize do
        if id.nil?
          if !response["ok"] && response["error"]["code"] == "shutting_down"
            # keyholed's goodbye (rule 3), the last frame of a connection drained at shutdown: it
            # stopped reading before every request it has not answered, so each waiting call was
            # never read, whatever its operation, and goes again on a new connection (:unread, not
            # rule 2's one re-send). Nothing follows it, so the connection ends now: no request
            # goes on it, and the calls need not wait for the end of stream.
            @goodbye = true
            end_connection(nil)
            return false
          end
          # About the connection (overloaded on connect, bad_frame, frame_too_large): nothing more
          # is sent on it, but keyholed still answers the requests it had read before it closes it;
          # those it leaves unanswered fail with this error at the close (rule 4). An ok answer
          # with a null id answers nothing this client sent: dropped.
          unless response["ok"]
            @error ||= Error.from_wire(response["error"])
            @retired = true
            @cv.broadcast
          end
          return true
        end
        waiter = @waiters.delete(id)
        if waiter
          waiter.state = :answered
          waiter.value = response
          @reader = nil if last && waiter.equal?(@reader)
          @cv.broadcast
        end
        close_if_idle
      end
      true
    end

    def response_problem(response)
      return "a payload that is not a JSON object" unless response.is_a?(Hash)

      id = response["id"]
      return "a response whose id is neither an integer, a string nor null" unless id.nil? || id.is_a?(Integer) || id.is_a?(String)

      case response["ok"]
      when true
        return "an ok response without a result object" unless response["result"].is_a?(Hash)
      when false
        error = response["error"]
        return "an error response without an error object" unless error.is_a?(Hash)
        return "an error response without a string code" unless error["code"].is_a?(String)
      else
        return "an object that is not a response (ok neither true nor false)"
      end
      nil
    end

    def protocol_error(message)
      @mu.synchronize { end_connection(ProtocolError.new(message)) }
    end
  end
end
