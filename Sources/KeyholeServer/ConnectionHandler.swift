import KeyholeProtocol
import Logging
import NIOCore
import NIOExtras

/// Serves one connection: cuts frames, runs operations (several at once), writes responses as they finish.
///
/// All decisions are the state machine's; this class performs them on the channel's event loop.
final class ConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let core: ServerCore
    private let idleTimeout: TimeAmount
    private let firstRequestGrace: TimeAmount
    let maxUnsentBytes: Int
    let maxConnectionsPerUID: Int
    let requestsPerSecond: Double
    let requestBurst: Double
    /// The peer's uid, once this connection counts towards its per-uid limit.
    var countedUID: UInt32?
    private var decoder: FrameDecoder
    var machine: ConnectionStateMachine
    var logger: Logger
    private var context: ChannelHandlerContext?
    /// The peer, as the kernel gave it when the connection was accepted (`nil` until then, or if not).
    private var peer: PeerCredentials?
    /// The operation groups the peer may use, worked out under policy version `accessVersion`.
    private var allowed: AccessPolicy.Groups = []
    private var accessVersion = UInt64.max
    /// A connection's first refusal is logged at notice, later ones at debug: a client looping on a
    /// denied operation must not flood the log.
    var refusals = 0
    /// Inside `channelRead`: responses are flushed once, in `channelReadComplete`.
    private var reading = false
    var needsFlush = false
    /// Responses encoded but not yet handed to the channel: one write per batch instead of per response.
    var outbound = ByteBuffer()
    /// `outbound` went to the channel and is to be cleared before it takes new responses.
    var outboundHandedOver = false
    /// Past this many bytes a batch is handed to the channel, so its writability (back pressure) is current.
    static let outboundBatchBytes = 64 * 1024
    /// The most an idle connection keeps for its next responses: a pipelining client's batch of eight
    /// verifications (about 700 bytes each) fits, so it reuses its buffer instead of growing a new one
    /// every batch; a thousand idle connections keep at most 16 MiB.
    static let keptOutboundBytes = 16 * 1024
    var closing = false
    private var idleTimer: Scheduled<Void>?
    private var frameTimer: Scheduled<Void>?
    private var drainTimer: Scheduled<Void>?
    private var firstRequestTimer: Scheduled<Void>?
    /// Asynchronous operations still running, cancelled if the connection goes away.
    private var tasks: [UInt64: Task<Void, Never>] = [:]
    private var nextTaskID: UInt64 = 0
    /// Where pending answers come back (looked up on first use).
    private var answers: AnswerDelivery?
    /// The request being served was answered in place (a `writing` operation), not with a `Response`.
    var answeredInPlace = false

    /// A connection held to `limits` for its whole life.
    init(core: ServerCore, limits: KeyholeServer.Configuration, logger: Logger) {
        self.core = core
        self.logger = logger
        self.idleTimeout = limits.idleTimeout
        self.firstRequestGrace = limits.firstRequestGrace
        self.maxUnsentBytes = limits.maxUnsentBytes
        self.maxConnectionsPerUID = limits.maxConnectionsPerUID
        self.requestsPerSecond = limits.requestsPerSecondPerUID
        self.requestBurst = limits.effectiveRequestBurstPerUID
        self.decoder = FrameDecoder(maxFrameBytes: limits.maxFrameBytes)
        self.machine = ConnectionStateMachine(
            maxInFlight: limits.maxInFlight,
            idleTimeout: limits.idleTimeout,
            frameTimeout: limits.frameTimeout,
            drainTimeout: limits.drainTimeout,
            now: .now()
        )
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        armIdleTimer(at: .now() + idleTimeout, context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        cancelEverything()
        releaseUID()
    }

    func channelActive(context: ChannelHandlerContext) {
        // The kernel's answer is at hand, so this completes before the first read is served.
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        core.credentials(context.channel).whenSuccess { peer in
            let handler = loopBound.value
            handler.peer = peer
            handler.accessVersion = .max
            if let peer {
                handler.logger[metadataKey: "peer_uid"] = "\(peer.uid)"
                handler.logger[metadataKey: "peer_pid"] = "\(peer.pid)"
                if let context = handler.context { handler.admit(peer, context: context) }
            }
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        machine.closed()
        cancelEverything()
        releaseUID()
        context.fireChannelInactive()
    }

    private func cancelEverything() {
        idleTimer?.cancel()
        frameTimer?.cancel()
        drainTimer?.cancel()
        firstRequestTimer?.cancel()
        for task in tasks.values { task.cancel() }
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let bytes = unwrapInboundIn(data)
        core.stats.bytesIn.add(bytes.readableBytes)
        // After reading stopped, bytes still arriving are not requests anyone may expect answered.
        guard machine.state == .open else { return }
        decoder.append(bytes)
        reading = true
        let frames = pump(context: context)
        reading = false
        guard machine.state == .open else { return }
        machine.bytesReceived(framesCompleted: frames, bufferedBytes: decoder.bufferedBytes, now: .now())
        if let deadline = machine.frameDeadline, frameTimer == nil {
            armFrameTimer(at: deadline, context: context)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flushIfNeeded(context: context)
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case ChannelEvent.inputClosed:
            // The client finished sending: answer what it sent, then close.
            stopReading(context: context)
        case is ChannelShouldQuiesceEvent:
            switch machine.quiesce(now: .now(), grace: firstRequestGrace) {
            case .drain:
                logger.debug("connection.draining")
                afterStoppingReading(context: context)
            case .awaitFirstRequest(let deadline):
                logger.debug("connection.draining_after_first_request")
                armFirstRequestTimer(at: deadline, context: context)
            case .none:
                break
            }
        default:
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        let read = machine.writabilityChanged(context.channel.isWritable, now: .now())
        if context.channel.isWritable {
            pump(context: context)
            flushIfNeeded(context: context)
        }
        if read { context.read() }
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // An I/O error: nothing more can be written, so nothing in flight can be answered.
        logger.debug("connection.error", metadata: ["error": "\(error)"])
        machine.closed()
        context.close(promise: nil)
    }

    // MARK: Outbound

    func read(context: ChannelHandlerContext) {
        if machine.readRequested() { context.read() }
    }

    // MARK: Serving

    /// Starts requests from the complete frames in the decoder while the state machine allows, then closes
    /// a drained connection. Returns how many frames were cut.
    @discardableResult
    private func pump(context: ChannelHandlerContext) -> Int {
        var frames = 0
        do {
            while machine.mayStartRequest, let frame = try decoder.next() {
                frames += 1
                machine.requestStarted()
                core.stats.inFlight.add()
                if let response = respond(to: frame, context: context) {
                    finish(response, context: context)
                } else if answeredInPlace {
                    answeredInPlace = false
                    finish(nil, context: context)
                }
            }
        } catch {
            failFraming(error, context: context)
        }
        if machine.firstRequestCameDuringShutdown {
            machine.stopReading(now: .now())
            armDrainDeadline(context: context)
        }
        if machine.state == .draining, machine.drainedIfIdle(framesLeft: decoder.hasCompleteFrame) {
            closeAfterWrites(context: context)
        }
        return frames
    }

    /// The response, or `nil` when an asynchronous operation will answer later. Every answer is
    /// counted in the metrics under its operation, with its time from `started`.
    private func respond(to frame: ByteBuffer, context: ChannelHandlerContext) -> Response? {
        let started = NIODeadline.now()
        let request: Request
        do {
            request = try Request.parse(frame)
        } catch {
            core.metrics.unknown.record(error.error.code, since: started)
            return Response(id: error.id, outcome: .failure(error.error))
        }
        // With the connection's peer_uid and peer_pid; the op as sent may be anything, so it is cut short.
        logger.debug("request", metadata: ["op": "\(request.op.prefix(64))"])
        guard let entry = core.operations[request.op] else {
            let refusal = requestsPerSecond > 0 ? rateRefusal() : nil
            core.metrics.unknown.record(refusal?.code ?? .unknownOp, since: started)
            return Response(id: request.id, outcome: .failure(refusal ?? .unknownOp(request.op)))
        }
        guard let response = respond(to: request, entry: entry, started: started, context: context) else {
            if answeredInPlace { entry.metrics.record(nil, since: started) }
            return nil
        }
        entry.metrics.record(response, since: started)
        return response
    }

    /// The error for `op` when the peer may not use its group, else `nil`. The allowed groups are
    /// worked out again only when the policy changed (a reload).
    func refusal(of op: String, requiring required: AccessPolicy.Groups) -> ProtocolError? {
        let version = core.access.currentVersion
        if version != accessVersion { (allowed, accessVersion) = core.access.allowed(for: peer) }
        guard allowed.isDisjoint(with: required) else { return nil }
        let group = AccessPolicy.group(of: op)?.rawValue ?? "admin"
        let who: String
        switch peer {
        case let peer? where peer.uid == PeerCredentials.overflowIDs.user:
            who = "uid \(peer.uid) (the overflow uid: a user keyholed's user namespace does not map, so unknown)"
        case let peer?: who = "uid \(peer.uid)"
        case nil: who = "a peer of unknown credentials"
        }
        refusals += 1
        // The connection's logger carries peer_uid and peer_pid.
        noteLimited("access.denied", ["op": "\(op)", "group": "\(group)", "audit": "true"], atNotice: refusals == 1)
        return .permissionDenied("'\(op)' is in operation group '\(group)', which \(who) may not use ([[access]] in keyholed.toml)")
    }

    /// Runs `work` in a task that answers `request` on the event loop when done.
    func startTask(
        request: Request, metrics: ServerMetrics.Operation, started: NIODeadline, context: ChannelHandlerContext,
        _ work: @escaping @Sendable () async throws(ProtocolError) -> [String: JSONValue]
    ) {
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        let eventLoop = context.eventLoop
        let taskID = nextTaskID
        nextTaskID += 1
        tasks[taskID] = Task {
            let outcome: Result<[String: JSONValue], ProtocolError>
            do throws(ProtocolError) {
                outcome = .success(try await work())
            } catch {
                outcome = .failure(error)
            }
            let response = Response(id: request.id, outcome: outcome)
            metrics.record(response, since: started)
            eventLoop.execute { loopBound.value.finishAsync(response, taskID: taskID) }
        }
    }

    /// Answers request `id` when `pending` completes, on this connection's event loop.
    func wait(
        for pending: PendingAnswer, id: RequestID?, metrics: ServerMetrics.Operation, started: NIODeadline, context: ChannelHandlerContext
    ) {
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        pending.whenComplete(on: delivery(context: context)) { outcome in
            let response: Response
            switch outcome {
            case .success(.object(let result)): response = Response(id: id, outcome: .success(result))
            case .success(.encoded(let result)): response = .encoded(id: id, result: result)
            case .failure(let error): response = Response(id: id, outcome: .failure(error))
            }
            metrics.record(response, since: started)
            loopBound.value.finishPending(response)
        }
    }

    /// This event loop's delivery of pending answers, shared by its connections.
    private func delivery(context: ChannelHandlerContext) -> AnswerDelivery {
        if let answers { return answers }
        let delivery = core.answerDelivery(for: context.eventLoop)
        answers = delivery
        return delivery
    }

    /// Writes a response (`nil`: it was written in place) and frees its slot.
    private func finish(_ response: Response?, context: ChannelHandlerContext) {
        core.stats.inFlight.subtract()
        if let response, machine.state != .closed { write(response, context: context) }
        let completion = machine.requestFinished(now: .now())
        if completion.read { context.read() }
    }

    private func finishAsync(_ response: Response, taskID: UInt64) {
        tasks.removeValue(forKey: taskID)
        finishPending(response)
    }

    /// Answers a request that was waiting, then reads on if that freed a slot.
    private func finishPending(_ response: Response) {
        guard let context else {
            // The handler is gone; the slot it held no longer matters, but the counter does.
            core.stats.inFlight.subtract()
            return
        }
        finish(response, context: context)
        pump(context: context)
        flushIfNeeded(context: context)
    }

    func write(_ response: Response, context: ChannelHandlerContext) {
        guard !closing else { return }
        if !context.channel.isWritable, unsentBytes(context: context) > maxUnsentBytes {
            cutSlowReader(context: context)
            return
        }
        if case .failure(let error) = response.outcome {
            core.stats.countError(error.code)
            logger.debug("request.failed", metadata: ["code": "\(error.code)"])
        }
        prepareOutbound()
        let before = outbound.readableBytes
        FrameEncoder.writeFrame(into: &outbound) { response.write(to: &$0) }
        wrote(outbound.readableBytes - before, context: context)
    }

    /// Gives the batched responses to the channel (not yet flushed).
    func handOver(context: ChannelHandlerContext) {
        guard !outboundHandedOver, outbound.readableBytes > 0 else { return }
        context.write(wrapOutboundOut(outbound), promise: nil)
        // Cleared before the next write, not now: the channel still holds these bytes.
        outboundHandedOver = true
    }

    private func flushIfNeeded(context: ChannelHandlerContext) {
        guard needsFlush, !reading else { return }
        needsFlush = false
        handOver(context: context)
        context.flush()
    }

    // MARK: Ending

    private func failFraming(_ error: ProtocolError, context: ChannelHandlerContext) {
        core.metrics.frameErrors.increment()
        noteLimited("connection.bad_frame", ["code": "\(error.code)"])
        // The error answers no request, so it takes no in-flight slot.
        write(Response(id: nil, outcome: .failure(error)), context: context)
        stopReading(context: context)
    }

    /// Ends reading; what was read is still answered, then the connection closes (pump decides when),
    /// or at the drain deadline at the latest.
    private func stopReading(context: ChannelHandlerContext) {
        guard machine.state == .open else { return }
        machine.stopReading(now: .now())
        afterStoppingReading(context: context)
    }

    /// Arms the drain deadline and, outside a read (which pumps itself), serves what was read.
    private func afterStoppingReading(context: ChannelHandlerContext) {
        armDrainDeadline(context: context)
        if !reading {
            pump(context: context)
            flushIfNeeded(context: context)
        }
    }

    /// Closes once every response written so far has reached the socket.
    func closeAfterWrites(context: ChannelHandlerContext) {
        guard !closing else { return }
        closing = true
        needsFlush = false
        handOver(context: context)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(channel.allocator.buffer(capacity: 0))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    // MARK: Timers

    private func schedule(at deadline: NIODeadline, context: ChannelHandlerContext, _ fired: @escaping @Sendable (ConnectionHandler) -> Void) -> Scheduled<Void> {
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        return context.eventLoop.scheduleTask(deadline: deadline) { fired(loopBound.value) }
    }

    private func armIdleTimer(at deadline: NIODeadline, context: ChannelHandlerContext) {
        idleTimer = schedule(at: deadline, context: context) { $0.idleTimerFired() }
    }

    private func idleTimerFired() {
        idleTimer = nil
        guard let context else { return }
        switch machine.idleTimerFired(now: .now()) {
        case .close:
            logger.debug("connection.idle_timeout")
            context.close(promise: nil)
        case .rearm(let deadline):
            armIdleTimer(at: deadline, context: context)
        case .drain, .disarm:
            break
        }
    }

    private func armFrameTimer(at deadline: NIODeadline, context: ChannelHandlerContext) {
        frameTimer = schedule(at: deadline, context: context) { $0.frameTimerFired() }
    }

    private func frameTimerFired() {
        frameTimer = nil
        guard let context else { return }
        switch machine.frameTimerFired(now: .now()) {
        case .drain:
            noteLimited("connection.frame_timeout", ["buffered_bytes": "\(decoder.bufferedBytes)"])
            afterStoppingReading(context: context)
        case .rearm(let deadline):
            armFrameTimer(at: deadline, context: context)
        case .close, .disarm:
            break
        }
    }

    /// Reading stopped: a wait for the first request is over, and the drain deadline runs.
    private func armDrainDeadline(context: ChannelHandlerContext) {
        firstRequestTimer?.cancel()
        firstRequestTimer = nil
        if let deadline = machine.drainDeadline { armDrainTimer(at: deadline, context: context) }
    }

    private func armFirstRequestTimer(at deadline: NIODeadline, context: ChannelHandlerContext) {
        firstRequestTimer = schedule(at: deadline, context: context) { $0.firstRequestTimerFired() }
    }

    private func firstRequestTimerFired() {
        firstRequestTimer = nil
        guard let context else { return }
        switch machine.firstRequestTimerFired(now: .now()) {
        case .drain:
            logger.debug("connection.draining")
            afterStoppingReading(context: context)
        case .rearm(let deadline):
            armFirstRequestTimer(at: deadline, context: context)
        case .close, .disarm:
            break
        }
    }

    private func armDrainTimer(at deadline: NIODeadline, context: ChannelHandlerContext) {
        drainTimer?.cancel()
        drainTimer = schedule(at: deadline, context: context) { $0.drainTimerFired() }
    }

    private func drainTimerFired() {
        drainTimer = nil
        guard let context else { return }
        switch machine.drainTimerFired(now: .now()) {
        case .close:
            noteLimited("connection.drain_timeout", ["in_flight": "\(machine.inFlight)"])
            context.close(promise: nil)
        case .rearm(let deadline):
            armDrainTimer(at: deadline, context: context)
        case .drain, .disarm:
            break
        }
    }
}
