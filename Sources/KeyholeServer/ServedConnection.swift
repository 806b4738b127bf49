import KeyholeProtocol
import Logging
import NIOCore

/// Serving one connection: cutting frames, running operations (several at once), writing answers,
/// back pressure, limits and timeouts, whichever loop does the I/O: SwiftNIO's channel
/// (`ConnectionHandler`) or keyholed's own epoll loop (`LoopConnection`, REQUEST_LOOP.md).
///
/// Every decision is the state machine's (`ConnectionStateMachine`); the code here performs them through
/// the few I/O calls each loop supplies, always on the connection's loop thread.
protocol ServedConnection: AnyObject {
    var core: ServerCore { get }
    var limits: ConnectionLimits { get }
    var machine: ConnectionStateMachine { get set }
    var decoder: FrameDecoder { get set }
    var logger: Logger { get set }
    /// The context requests are handed, made from `logger` and the peer on first use; `nil` again
    /// whenever either changes (the logger's `didSet`, `identified(as:)`).
    var requestContext: RequestContext? { get set }
    /// Answers encoded and not yet handed to the socket.
    var outbound: ByteBuffer { get set }
    /// The connection is closing: nothing more is written.
    var closing: Bool { get set }
    /// The request being served was answered in place (a `writing` operation), not with a `Response`.
    var answeredInPlace: Bool { get set }
    /// Who the peer is, what it may do, and how often it was refused.
    var access: ConnectionAccess { get set }
    /// Asynchronous operations still running, cancelled if the connection goes away.
    var tasks: ConnectionTasks { get set }
    /// Where the durations of answers made at once are recorded, as the loop's pass ends; `nil`
    /// where each reads the clock itself.
    var passDurations: PassDurations? { get }

    /// Whether the socket takes more output without pushing back.
    var isWritable: Bool { get }
    /// Output not yet on the socket: in `outbound`, and queued below it.
    var unsentBytes: Int { get }
    /// Readies `outbound` for more answers.
    func prepareOutbound()
    /// `bytes` more were written into `outbound`: send them soon.
    func outboundWritten(_ bytes: Int)
    /// Sends what is in `outbound` now if a read is not under way (which sends once it ends).
    func flushIfNeeded()
    /// Reads on: back pressure was released.
    func resumeReading()
    /// Closes now, dropping what was not sent.
    func closeNow()
    /// Closes once everything written so far has been sent.
    func closeAfterWrites()
    /// Calls `timerFired(kind)` at `deadline` (replacing the kind's earlier timer); `nil` cancels it.
    func setTimer(_ kind: ConnectionTimer, at deadline: NIODeadline?)
    /// Whether a timer of `kind` is armed.
    func hasTimer(_ kind: ConnectionTimer) -> Bool
    /// Runs a closure on the connection's loop, from any thread (nothing once the connection is gone
    /// from a loop that cannot say where it ran).
    var executor: @Sendable (@escaping @Sendable () -> Void) -> Void { get }
    /// A closure to be called on this connection's loop only (checked in debug builds), which runs
    /// `body` with the connection and its argument there.
    func confined<Value>(_ body: @escaping (Self, Value) -> Void) -> @Sendable (Value) -> Void
    /// At its uid's limit: holds the connection, not reading, until every loop has read the hang-ups
    /// already signalled, then calls `admit(peer, afterWaiting: true)` on its loop. `false` when the loop
    /// cannot, and the connection is refused at once.
    func deferAdmission(of peer: PeerCredentials) -> Bool
    /// Whether the loop can hold a connection refused at connect for a while (`holdRefused`).
    var holdsRefusals: Bool { get }
    /// Refused at connect: stops reading, and fires the `refusalHeld` timer at `deadline` (which
    /// answers, then closes), unless the peer closes first.
    func holdRefused(until deadline: NIODeadline)
    /// Refused at connect: the loop accepts the next connections a moment later, together
    /// (`SocketLoop.pauseAccepting`), so that churning through refusals costs the client time and
    /// keyholed few wake-ups.
    func pauseAccepting()
    /// Where this loop's pending answers are delivered.
    var delivery: AnswerDelivery { get }
    /// The time for the connection's timers and for when a request started: the clock, or the time
    /// the loop's current pass began (one clock read per pass, not several per request).
    var now: NIODeadline { get }
    /// Whether each request logs its debug line: the logger's level, read once per pass where the
    /// loop has passes (`PassLogLevel`).
    var logsRequests: Bool { get }
}

/// The limits a connection keeps for its whole life (a reload's new ones apply to new connections).
struct ConnectionLimits {
    let firstRequestGrace: TimeAmount
    let maxUnsentBytes: Int
    let maxConnectionsPerUID: Int
    let rates: PeerLimits.Rates
    let frameErrorHold: TimeAmount

    init(_ configuration: KeyholeServer.Configuration) {
        firstRequestGrace = configuration.firstRequestGrace
        maxUnsentBytes = configuration.maxUnsentBytes
        maxConnectionsPerUID = configuration.maxConnectionsPerUID
        rates = configuration.peerRates
        frameErrorHold = configuration.frameErrorHold
    }
}

/// The timers of a connection (the raw value indexes a table of them).
enum ConnectionTimer: Int, CaseIterable {
    case idle, frame, drain, firstRequest
    /// A connection refused at connect is answered and closed (`holdRefused`).
    case refusalHeld
}

extension ConnectionStateMachine {
    /// A machine held to `limits`, starting now.
    init(limits: KeyholeServer.Configuration) {
        self.init(
            maxInFlight: limits.maxInFlight, idleTimeout: limits.idleTimeout, frameTimeout: limits.frameTimeout,
            drainTimeout: limits.drainTimeout, now: .now())
    }
}

extension ServedConnection {
    // MARK: Reading

    /// Bytes arrived: serves the frames they complete, and arms the frame timer for one left incomplete.
    func received(_ bytes: ByteBuffer) {
        core.stats.bytesIn.add(bytes.readableBytes)
        // After reading stopped, bytes still arriving are not requests anyone may expect answered.
        guard machine.state == .open else { return }
        decoder.append(bytes)
        let frames = pump()
        guard machine.state == .open else { return }
        machine.bytesReceived(framesCompleted: frames, bufferedBytes: decoder.bufferedBytes, now: now)
        if let deadline = machine.frameDeadline, !hasTimer(.frame) {
            setTimer(.frame, at: deadline)
        }
    }

    /// Starts requests from the complete frames in the decoder while the state machine allows, then closes
    /// a drained connection. Returns how many frames were cut.
    @discardableResult
    func pump() -> Int {
        var frames = 0
        do {
            while machine.mayStartRequest, let frame = try decoder.next() {
                frames += 1
                machine.requestStarted()
                if let response = respond(to: frame) {
                    finish(response)
                } else if answeredInPlace {
                    answeredInPlace = false
                    finish(nil)
                } else {
                    // Answered later (`finishPending`). A request answered as it is read is never
                    // counted: in flight for no longer than this call, it is nothing `stats` could
                    // see, and counting it cost every request two atomic additions.
                    core.stats.inFlight.add()
                }
            }
        } catch {
            failFraming(error)
        }
        if machine.firstRequestCameDuringShutdown {
            machine.stopReading(now: now)
            armDrainDeadline()
        }
        if machine.state == .draining, machine.drainedIfIdle(framesLeft: decoder.hasCompleteFrame) {
            if machine.endsWithGoodbye { writeGoodbye() }
            closeAfterWritesOnce()
        }
        return frames
    }

    /// The response, or `nil` when an asynchronous operation will answer later. Every answer is
    /// counted in the metrics under its operation, with its time from `started`.
    private func respond(to frame: ByteBuffer) -> Response? {
        let started = now
        let request: Request
        do {
            request = try Request.parse(frame, operations: core.operationNames)
        } catch {
            core.metrics.unknown.record(error.error.code, since: started)
            return Response(id: error.id, outcome: .failure(error.error))
        }
        // With the connection's peer_uid and peer_pid; the op as sent may be anything, so it is cut short.
        if logsRequests { logger.debug("request", metadata: ["op": "\(request.op.prefix(64))"]) }
        guard let entry = core.entry(for: request) else {
            let refusal = limits.rates.requests > 0 ? rateRefusal() : nil
            core.metrics.unknown.record(refusal?.code ?? .unknownOp, since: started)
            return Response(id: request.id, outcome: .failure(refusal ?? .unknownOp(request.op)))
        }
        guard let response = respond(to: request, entry: entry, started: started) else {
            if answeredInPlace { entry.metrics.record(nil, since: started, in: passDurations) }
            return nil
        }
        entry.metrics.record(response, since: started, in: passDurations)
        return response
    }

    /// Writes a response (`nil`: it was written in place) and frees its slot.
    func finish(_ response: Response?) {
        if let response, machine.state != .closed { write(response) }
        let completion = machine.requestFinished(now: now, framesWaiting: decoder.hasCompleteFrame)
        if completion.read { resumeReading() }
    }

    /// Answers a request that was waiting, then serves what that let through.
    func finishPending(_ response: Response) {
        core.stats.inFlight.subtract()
        finish(response)
        pump()
        flushIfNeeded()
    }

    func write(_ response: Response) {
        guard !closing else { return }
        if !isWritable, unsentBytes > limits.maxUnsentBytes {
            cutSlowReader()
            return
        }
        if case .failure(let error) = response.outcome {
            core.stats.countError(error.code)
            logger.debug("request.failed", metadata: ["code": "\(error.code)"])
        }
        append(response)
    }

    /// Encodes `response` as a frame at the end of `outbound`, to be sent soon.
    private func append(_ response: Response) {
        prepareOutbound()
        let before = outbound.readableBytes
        FrameEncoder.writeFrame(into: &outbound) { response.write(to: &$0) }
        outboundWritten(outbound.readableBytes - before)
    }

    /// The last frame of a connection drained at shutdown, after every answer: a null-id
    /// `shutting_down` that promises the client that whatever it sent and got no answer to was never
    /// read (reading stopped before it, and bytes that came later were dropped), so it may send it
    /// again on a new connection even when it is a change. Not counted as an error: it answers nothing.
    private func writeGoodbye() {
        guard !closing else { return }
        append(Response(id: nil, outcome: .failure(.goodbye())))
    }

    // MARK: Ending

    /// The socket closed (either side): nothing in flight can be answered.
    func connectionClosed() {
        machine.closed()
        tasks.cancelAll()
        for timer in ConnectionTimer.allCases { setTimer(timer, at: nil) }
        releaseUID()
    }

    private func failFraming(_ error: ProtocolError) {
        core.metrics.frameErrors.increment()
        access.committedFrameError = true
        machine.framingFailed()
        noteLimited("connection.bad_frame", ["code": "\(error.code)"])
        // The error answers no request, so it takes no in-flight slot.
        write(Response(id: nil, outcome: .failure(error)))
        stopReading(serve: false)
    }

    /// Ends reading; what was read is still answered, then the connection closes (pump decides when),
    /// or at the drain deadline at the latest. `serve`: serve what was read now (outside a read, which
    /// serves by itself).
    func stopReading(serve: Bool) {
        guard machine.state == .open else { return }
        machine.stopReading(now: now)
        afterStoppingReading(serve: serve)
    }

    /// Arms the drain deadline and, when `serve`, serves what was read.
    func afterStoppingReading(serve: Bool) {
        armDrainDeadline()
        if serve {
            pump()
            flushIfNeeded()
        }
    }

    /// Shutdown began: drain now, or after the first request of a connection that has sent none yet.
    func quiesce(serve: Bool) {
        switch machine.quiesce(now: now, grace: limits.firstRequestGrace) {
        case .drain:
            logger.debug("connection.draining")
            afterStoppingReading(serve: serve)
        case .awaitFirstRequest(let deadline):
            logger.debug("connection.draining_after_first_request")
            setTimer(.firstRequest, at: deadline)
        case .none:
            break
        }
    }

    func closeAfterWritesOnce() {
        guard !closing else { return }
        closing = true
        closeAfterWrites()
    }

    /// Reading stopped: a wait for the first request is over, and the drain deadline runs.
    private func armDrainDeadline() {
        setTimer(.firstRequest, at: nil)
        if let deadline = machine.drainDeadline { setTimer(.drain, at: deadline) }
    }
}
