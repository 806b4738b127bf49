import NIOCore

/// The life of one client connection, without I/O: when to start a request, when to read, when to close.
///
/// Complete frames are cut from the decoder only when a request may start (a free in-flight slot and a
/// writable channel), so a client that pipelines without reading its answers leaves its bytes unparsed
/// in the decoder, bounded by one read, instead of growing queues of requests and responses.
/// Time is passed in, so the timeout rules are tested without clocks or sockets.
struct ConnectionStateMachine {
    enum State: Equatable {
        /// Reading and serving.
        case open
        /// No more reading (frame error, shutdown, client finished sending, frame timeout): answer what
        /// was read, then close; force-closed at the drain deadline.
        case draining
        /// Closed or closing; nothing more happens.
        case closed
    }

    /// What to do after a request finished.
    struct Completion: Equatable {
        /// Ask the channel for more bytes (a read was held back before).
        var read = false
    }

    /// What a timer found.
    enum TimerVerdict: Equatable {
        /// Close now, dropping nothing that could still be answered.
        case close
        /// Stop reading and drain: answer what is in flight, then close.
        case drain
        case rearm(NIODeadline)
        case disarm
    }

    let maxInFlight: Int
    let idleTimeout: TimeAmount
    let frameTimeout: TimeAmount
    let drainTimeout: TimeAmount

    private(set) var state = State.open
    private(set) var inFlight = 0
    private var readHeldBack = false
    private var writable = true
    private var lastActivity: NIODeadline
    /// When the frame that is still incomplete began to arrive.
    private var partialFrameSince: NIODeadline?
    /// When a draining connection is closed whatever is left.
    private(set) var drainDeadline: NIODeadline?
    /// Requests started on this connection.
    private(set) var requestsStarted = 0
    /// Set while shutdown waits for this connection's first request (see `quiesce`).
    private(set) var firstRequestDeadline: NIODeadline?
    /// Shutdown stopped this connection's reading (`quiesce`), so once drained it ends with keyholed's
    /// goodbye: a null-id `shutting_down` that tells the client no unanswered request was read.
    /// Not when reading had stopped for another reason first, nor on a forced close.
    private(set) var endsWithGoodbye = false

    init(maxInFlight: Int, idleTimeout: TimeAmount, frameTimeout: TimeAmount, drainTimeout: TimeAmount, now: NIODeadline) {
        precondition(maxInFlight >= 1)
        self.maxInFlight = maxInFlight
        self.idleTimeout = idleTimeout
        self.frameTimeout = frameTimeout
        self.drainTimeout = drainTimeout
        self.lastActivity = now
    }

    /// A request may start now: cut the next complete frame, if any.
    var mayStartRequest: Bool {
        state != .closed && inFlight < maxInFlight && writable
    }

    private var mayRead: Bool {
        state == .open && inFlight < maxInFlight && writable
    }

    // MARK: Reading

    /// Bytes arrived. `framesCompleted` frames were cut from them; `bufferedBytes` remain in the decoder.
    mutating func bytesReceived(framesCompleted: Int, bufferedBytes: Int, now: NIODeadline) {
        lastActivity = now
        if bufferedBytes == 0 {
            partialFrameSince = nil
        } else if framesCompleted > 0 || partialFrameSince == nil {
            // The incomplete frame started in this read.
            partialFrameSince = now
        }
    }

    /// The channel wants to read: `true` to let it, `false` to hold the read back (back pressure).
    /// `framesWaiting`: complete frames wait in the decoder, unserved: they are served before more is
    /// read, so that what is held is at most one read.
    mutating func readRequested(framesWaiting: Bool = false) -> Bool {
        if mayRead, !framesWaiting { return true }
        if state == .open { readHeldBack = true }
        return false
    }

    /// The channel's writability changed: returns `true` when a held-back read should now be issued.
    mutating func writabilityChanged(_ isWritable: Bool, now: NIODeadline, framesWaiting: Bool = false) -> Bool {
        writable = isWritable
        return releaseHeldBackRead(now: now, framesWaiting: framesWaiting)
    }

    private mutating func releaseHeldBackRead(now: NIODeadline, framesWaiting: Bool) -> Bool {
        // While frames wait, the read stays held: the requests they start finish later and ask again.
        guard readHeldBack, mayRead, !framesWaiting else { return false }
        readHeldBack = false
        // The client was not slow while we were not reading: restart its clock for the frame in progress.
        if partialFrameSince != nil { partialFrameSince = now }
        return true
    }

    // MARK: Serving

    /// A frame was cut and its request starts.
    mutating func requestStarted() {
        precondition(mayStartRequest, "requestStarted while requests may not start")
        inFlight += 1
        requestsStarted += 1
    }

    /// Whether shutdown was waiting for this connection's first request and it has started: reading
    /// stops now (`stopReading`), and the connection drains.
    var firstRequestCameDuringShutdown: Bool {
        state == .open && firstRequestDeadline != nil && requestsStarted > 0
    }

    /// A request's response has been handed to the channel (or its connection is gone).
    mutating func requestFinished(now: NIODeadline, framesWaiting: Bool = false) -> Completion {
        precondition(inFlight > 0, "requestFinished without a request in flight")
        inFlight -= 1
        guard state == .open else { return Completion() }
        if inFlight == 0 { lastActivity = now }
        return Completion(read: releaseHeldBackRead(now: now, framesWaiting: framesWaiting))
    }

    /// Whether a draining connection is done: nothing in flight, and the handler found no complete frame
    /// left to serve. Moves to `.closed` when it is.
    mutating func drainedIfIdle(framesLeft: Bool) -> Bool {
        guard state == .draining, inFlight == 0, !framesLeft else { return false }
        state = .closed
        return true
    }

    // MARK: Ending

    /// What shutdown does to a connection.
    enum QuiesceVerdict: Equatable {
        /// Reading stopped: answer what was read, then close.
        case drain
        /// Read on until the first request starts (then drain), or until the deadline (then drain).
        case awaitFirstRequest(NIODeadline)
        /// Reading had stopped already.
        case none
    }

    /// Shutdown began. A connection that has not started a request yet keeps reading for up to `grace`
    /// (at most the drain timeout): its client connected just before the listener closed and is
    /// sending its first request, which closing now would fail. Any other connection stops reading now.
    mutating func quiesce(now: NIODeadline, grace: TimeAmount) -> QuiesceVerdict {
        guard state == .open else { return .none }
        endsWithGoodbye = true
        if requestsStarted == 0 {
            let deadline = now + min(grace, drainTimeout)
            firstRequestDeadline = deadline
            return .awaitFirstRequest(deadline)
        }
        stopReading(now: now)
        return .drain
    }

    /// Stop reading (a frame error, shutdown, the client closed its sending side, a frame timeout).
    /// Frames already read are still served; the connection closes once drained, or at the drain deadline.
    mutating func stopReading(now: NIODeadline) {
        guard state == .open else { return }
        state = .draining
        readHeldBack = false
        partialFrameSince = nil
        firstRequestDeadline = nil
        drainDeadline = now + drainTimeout
    }

    /// The connection broke the framing: its null-id error (`bad_frame`, `frame_too_large`) is the last
    /// frame it gets, not the goodbye, even when shutdown had begun (PROTOCOL.md section 5).
    mutating func framingFailed() {
        endsWithGoodbye = false
    }

    /// The channel closed.
    mutating func closed() {
        state = .closed
        partialFrameSince = nil
        drainDeadline = nil
    }

    // MARK: Timers

    /// The idle timer fired: close a connection with nothing in flight and no bytes for `idleTimeout`.
    mutating func idleTimerFired(now: NIODeadline) -> TimerVerdict {
        guard state == .open else { return .disarm }
        if inFlight > 0 { return .rearm(now + idleTimeout) }
        let deadline = lastActivity + idleTimeout
        if deadline <= now {
            if endsWithGoodbye {
                // Shutdown is waiting for this connection's first request: it ends as shutdown
                // ends a connection, with the goodbye, so a client writing now sends again.
                stopReading(now: now)
                return .drain
            }
            state = .closed
            return .close
        }
        return .rearm(deadline)
    }

    /// When the frame timer should fire next, if a frame is in progress.
    var frameDeadline: NIODeadline? {
        partialFrameSince.map { $0 + frameTimeout }
    }

    /// The frame timer fired: a frame in progress older than `frameTimeout` ends reading; requests already
    /// in flight are still answered.
    mutating func frameTimerFired(now: NIODeadline) -> TimerVerdict {
        guard state == .open, let deadline = frameDeadline else { return .disarm }
        // While we hold reads back the delay is ours, not the client's.
        if readHeldBack || !mayRead { return .rearm(now + frameTimeout) }
        if deadline <= now {
            stopReading(now: now)
            return .drain
        }
        return .rearm(deadline)
    }

    /// The first-request timer fired: a connection still waiting for its first request at shutdown
    /// stops reading and drains (it is idle, so it closes).
    mutating func firstRequestTimerFired(now: NIODeadline) -> TimerVerdict {
        guard state == .open, let deadline = firstRequestDeadline else { return .disarm }
        if deadline <= now {
            stopReading(now: now)
            return .drain
        }
        return .rearm(deadline)
    }

    /// The drain timer fired: a draining connection that is still open is closed now.
    mutating func drainTimerFired(now: NIODeadline) -> TimerVerdict {
        // Also when drained but not yet closed: the last writes may never flush to a client that does not read.
        guard state != .open, let deadline = drainDeadline else { return .disarm }
        if deadline <= now {
            state = .closed
            return .close
        }
        return .rearm(deadline)
    }
}
