import KeyholeProtocol
import Logging
import NIOCore
import NIOExtras

/// Serves one connection on SwiftNIO's channel pipeline (`[server] loop = "nio"`): the channel's
/// events go to `ServedConnection`'s serving, which does its I/O through the calls below.
final class ConnectionHandler: ChannelDuplexHandler, ServedConnection {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let core: ServerCore
    let limits: ConnectionLimits
    var decoder: FrameDecoder
    var machine: ConnectionStateMachine
    var logger: Logger {
        didSet { requestContext = nil }
    }
    var requestContext: RequestContext?
    var access = ConnectionAccess()
    var tasks = ConnectionTasks()
    /// None: SwiftNIO's loop has no end of pass to record at, so each answer reads the clock.
    var passDurations: PassDurations? { nil }
    var closing = false
    var answeredInPlace = false
    private let idleTimeout: TimeAmount
    private var context: ChannelHandlerContext?
    /// Inside `channelRead`: responses are flushed once, in `channelReadComplete`.
    private var reading = false
    private var needsFlush = false
    /// Responses encoded but not yet handed to the channel: one write per batch instead of per response.
    var outbound = ByteBuffer()
    /// `outbound` went to the channel and is to be cleared before it takes new responses.
    private var outboundHandedOver = false
    /// Past this many bytes a batch is handed to the channel, so its writability (back pressure) is current.
    static let outboundBatchBytes = 64 * 1024
    /// The most an idle connection keeps for its next responses: a pipelining client's batch of eight
    /// verifications (about 700 bytes each) fits, so it reuses its buffer instead of growing a new one
    /// every batch; a thousand idle connections keep at most 16 MiB.
    static let keptOutboundBytes = 16 * 1024
    private var timers: [ConnectionTimer: Scheduled<Void>] = [:]
    /// Where pending answers come back (looked up on first use).
    private var answers: AnswerDelivery?

    /// A connection held to `limits` for its whole life.
    init(core: ServerCore, limits: KeyholeServer.Configuration, logger: Logger) {
        self.core = core
        self.logger = logger
        self.limits = ConnectionLimits(limits)
        self.idleTimeout = limits.idleTimeout
        self.decoder = FrameDecoder(maxFrameBytes: limits.maxFrameBytes)
        self.machine = ConnectionStateMachine(limits: limits)
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        setTimer(.idle, at: .now() + idleTimeout)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        connectionClosed()
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        // The kernel's answer is at hand, so this completes before the first read is served.
        let identified = confined { (handler, peer: PeerCredentials?) in
            guard handler.context != nil else { return }
            handler.identified(as: peer)
        }
        core.credentials(context.channel).whenSuccess(identified)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        connectionClosed()
        context.fireChannelInactive()
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        reading = true
        received(unwrapInboundIn(data))
        reading = false
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        flushIfNeeded()
        context.fireChannelReadComplete()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        switch event {
        case ChannelEvent.inputClosed:
            // The client finished sending: answer what it sent, then close.
            stopReading(serve: !reading)
        case is ChannelShouldQuiesceEvent:
            quiesce(serve: !reading)
        default:
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        let read = machine.writabilityChanged(context.channel.isWritable, now: now, framesWaiting: decoder.hasCompleteFrame)
        if context.channel.isWritable {
            pump()
            flushIfNeeded()
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
        if machine.readRequested(framesWaiting: decoder.hasCompleteFrame) { context.read() }
    }

    // MARK: ServedConnection's I/O

    var isWritable: Bool { context?.channel.isWritable ?? false }

    /// Responses not yet on the socket: batched here, and queued in the channel. The channel's
    /// queue is asked for only when it pushes back (not writable), which it does well below the limit.
    var unsentBytes: Int {
        let batched = outboundHandedOver ? 0 : outbound.readableBytes
        let queued = (try? context?.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
        return batched + queued
    }

    /// Readies the batch for more answers. By now the channel has usually written the last batch and
    /// let go of it: then this reuses its storage instead of allocating. A buffer a big batch grew is
    /// not kept.
    func prepareOutbound() {
        guard outboundHandedOver else { return }
        if outbound.capacity <= Self.keptOutboundBytes {
            outbound.clear()
        } else {
            outbound = ByteBuffer()
        }
        outboundHandedOver = false
    }

    func outboundWritten(_ bytes: Int) {
        core.stats.bytesOut.add(bytes)
        needsFlush = true
        if outbound.readableBytes >= Self.outboundBatchBytes { handOver() }
    }

    /// Gives the batched responses to the channel (not yet flushed).
    private func handOver() {
        guard let context, !outboundHandedOver, outbound.readableBytes > 0 else { return }
        context.write(wrapOutboundOut(outbound), promise: nil)
        // Cleared before the next write, not now: the channel still holds these bytes.
        outboundHandedOver = true
    }

    func flushIfNeeded() {
        guard needsFlush, !reading, let context else { return }
        needsFlush = false
        handOver()
        context.flush()
    }

    func resumeReading() {
        context?.read()
    }

    func closeNow() {
        context?.close(promise: nil)
    }

    func closeAfterWrites() {
        guard let context else { return }
        needsFlush = false
        handOver()
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(channel.allocator.buffer(capacity: 0))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    func setTimer(_ kind: ConnectionTimer, at deadline: NIODeadline?) {
        timers.removeValue(forKey: kind)?.cancel()
        guard let deadline, let context else { return }
        let fired = confined { (handler, _: Void) in
            handler.timers[kind] = nil
            handler.timerFired(kind)
        }
        timers[kind] = context.eventLoop.scheduleTask(deadline: deadline) { fired(()) }
    }

    func hasTimer(_ kind: ConnectionTimer) -> Bool { timers[kind] != nil }

    var executor: @Sendable (@escaping @Sendable () -> Void) -> Void {
        guard let eventLoop = context?.eventLoop else { return { _ in } }
        return { eventLoop.execute($0) }
    }

    func confined<Value>(_ body: @escaping (ConnectionHandler, Value) -> Void) -> @Sendable (Value) -> Void {
        guard let eventLoop = context?.eventLoop else { return { _ in } }
        let bound = NIOLoopBound(self, eventLoop: eventLoop)
        let body = LoopConfined(value: body)
        return { value in body.value(bound.value, value) }
    }

    var now: NIODeadline { .now() }
    var logsRequests: Bool { logger.logLevel <= .debug }

    /// SwiftNIO's loops cannot say when they have read every hang-up signalled: refused at once (the
    /// `nio` loop is kept for a release only).
    func deferAdmission(of peer: PeerCredentials) -> Bool { false }

    /// SwiftNIO's loop (kept for one release) closes a refused connection once its answer is sent.
    var holdsRefusals: Bool { false }

    func holdRefused(until deadline: NIODeadline) {}

    func pauseAccepting() {}

    /// This event loop's delivery of pending answers, shared by its connections.
    var delivery: AnswerDelivery {
        if let answers { return answers }
        let delivery = core.answerDelivery(for: context!.eventLoop)
        answers = delivery
        return delivery
    }
}
