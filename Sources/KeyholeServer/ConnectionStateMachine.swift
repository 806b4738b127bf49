import NIOCore

/// The life of one client connection, without I/O: which frames to serve now, when to read, when to close.
///
/// The handler feeds it events and performs the actions it returns. Time is passed in, so the timeout
/// rules are tested without clocks or sockets.
struct ConnectionStateMachine {
    enum State: Equatable {
        /// Reading and serving.
        case open
        /// No more reading (frame error, shutdown, client finished sending): answer what was read, then close.
        case draining
        /// Closed or closing; nothing more happens.
        case closed
    }

    /// What to do after a request finished.
    struct Completion: Equatable {
        /// A queued frame to serve now.
        var next: ByteBuffer?
        /// Ask the channel for more bytes (a read was held back before).
        var read = false
        /// Every response is written: close the connection.
        var close = false
    }

    /// What a timer found.
    enum TimerVerdict: Equatable {
        case close
        case rearm(NIODeadline)
        case disarm
    }

    let maxInFlight: Int
    let idleTimeout: TimeAmount
    let frameTimeout: TimeAmount

    private(set) var state = State.open
    private(set) var inFlight = 0
    private var queued = CircularBuffer<ByteBuffer>()
    private var readHeldBack = false
    private var writable = true
    private var lastActivity: NIODeadline
    /// When the frame that is still incomplete began to arrive.
    private var partialFrameSince: NIODeadline?

    init(maxInFlight: Int, idleTimeout: TimeAmount, frameTimeout: TimeAmount, now: NIODeadline) {
        precondition(maxInFlight >= 1)
        self.maxInFlight = maxInFlight
        self.idleTimeout = idleTimeout
        self.frameTimeout = frameTimeout
        self.lastActivity = now
    }

    /// Requests read but not yet started, waiting for an in-flight slot.
    var queuedCount: Int { queued.count }

    private var mayRead: Bool {
        state == .open && inFlight < maxInFlight && queued.isEmpty && writable
    }

    // MARK: Reading

    /// Bytes arrived. `framesCompleted` frames were cut from them; `bufferedBytes` remain of a frame
    /// that is still incomplete.
    mutating func bytesReceived(framesCompleted: Int, bufferedBytes: Int, now: NIODeadline) {
        lastActivity = now
        if bufferedBytes == 0 {
            partialFrameSince = nil
        } else if framesCompleted > 0 || partialFrameSince == nil {
            // The incomplete frame started in this read.
            partialFrameSince = now
        }
    }

    /// A complete frame: returns it when it is to be served now, `nil` when it waits for a slot.
    mutating func frameReceived(_ frame: ByteBuffer) -> ByteBuffer? {
        guard state != .closed else { return nil }
        if inFlight < maxInFlight && queued.isEmpty {
            inFlight += 1
            return frame
        }
        queued.append(frame)
        return nil
    }

    /// The channel wants to read: `true` to let it, `false` to hold the read back (back pressure).
    mutating func readRequested() -> Bool {
        if mayRead { return true }
        if state == .open { readHeldBack = true }
        return false
    }

    /// The channel's writability changed: returns `true` when a held-back read should now be issued.
    mutating func writabilityChanged(_ isWritable: Bool, now: NIODeadline) -> Bool {
        writable = isWritable
        return releaseHeldBackRead(now: now)
    }

    private mutating func releaseHeldBackRead(now: NIODeadline) -> Bool {
        guard readHeldBack, mayRead else { return false }
        readHeldBack = false
        // The client was not slow while we were not reading: restart its clock for the frame in progress.
        if partialFrameSince != nil { partialFrameSince = now }
        return true
    }

    // MARK: Serving

    /// A request's response has been handed to the channel.
    mutating func requestFinished(now: NIODeadline) -> Completion {
        precondition(inFlight > 0, "requestFinished without a request in flight")
        inFlight -= 1
        guard state != .closed else { return Completion() }
        if let next = queued.popFirst() {
            inFlight += 1
            return Completion(next: next)
        }
        if inFlight == 0 { lastActivity = now }
        if state == .draining && inFlight == 0 {
            state = .closed
            return Completion(close: true)
        }
        return Completion(read: releaseHeldBackRead(now: now))
    }

    // MARK: Ending

    /// Stop reading (a frame error, shutdown, or the client closed its sending side). Returns `true` when
    /// the connection can close at once because nothing is left to answer.
    mutating func stopReading() -> Bool {
        guard state == .open else { return false }
        state = .draining
        readHeldBack = false
        partialFrameSince = nil
        if inFlight == 0 && queued.isEmpty {
            state = .closed
            return true
        }
        return false
    }

    /// The channel closed.
    mutating func closed() {
        state = .closed
        queued.removeAll()
        partialFrameSince = nil
    }

    // MARK: Timers

    /// The idle timer fired: close a connection with nothing in flight and no bytes for `idleTimeout`.
    mutating func idleTimerFired(now: NIODeadline) -> TimerVerdict {
        guard state == .open else { return .disarm }
        if inFlight > 0 || !queued.isEmpty { return .rearm(now + idleTimeout) }
        let deadline = lastActivity + idleTimeout
        if deadline <= now {
            state = .closed
            return .close
        }
        return .rearm(deadline)
    }

    /// When the frame timer should fire next, if a frame is in progress.
    var frameDeadline: NIODeadline? {
        partialFrameSince.map { $0 + frameTimeout }
    }

    /// The frame timer fired: close a connection whose frame in progress is older than `frameTimeout`.
    mutating func frameTimerFired(now: NIODeadline) -> TimerVerdict {
        guard state == .open, let deadline = frameDeadline else { return .disarm }
        // While we hold reads back the delay is ours, not the client's.
        if readHeldBack || !mayRead { return .rearm(now + frameTimeout) }
        if deadline <= now {
            state = .closed
            return .close
        }
        return .rearm(deadline)
    }
}
