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

    private let core: ServerCore
    private var decoder: FrameDecoder
    private var machine: ConnectionStateMachine
    private var logger: Logger
    private var context: ChannelHandlerContext?
    /// Inside `channelRead`: responses are flushed once, in `channelReadComplete`.
    private var reading = false
    private var needsFlush = false
    private var idleTimer: Scheduled<Void>?
    private var frameTimer: Scheduled<Void>?

    init(core: ServerCore, logger: Logger) {
        self.core = core
        self.logger = logger
        self.decoder = FrameDecoder(maxFrameBytes: core.configuration.maxFrameBytes)
        self.machine = ConnectionStateMachine(
            maxInFlight: core.configuration.maxInFlight,
            idleTimeout: core.configuration.idleTimeout,
            frameTimeout: core.configuration.frameTimeout,
            now: .now()
        )
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        armIdleTimer(at: .now() + core.configuration.idleTimeout, context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        idleTimer?.cancel()
        frameTimer?.cancel()
    }

    func channelInactive(context: ChannelHandlerContext) {
        machine.closed()
        idleTimer?.cancel()
        frameTimer?.cancel()
        context.fireChannelInactive()
    }

    // MARK: Inbound

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let bytes = unwrapInboundIn(data)
        core.stats.bytesIn.add(bytes.readableBytes)
        guard machine.state == .open else { return }
        decoder.append(bytes)
        reading = true
        defer { reading = false }
        var frames = 0
        do {
            while machine.state == .open, let frame = try decoder.next() {
                frames += 1
                if let now = machine.frameReceived(frame) { serve(now, context: context) }
            }
        } catch {
            failFraming(error, context: context)
            return
        }
        let now = NIODeadline.now()
        machine.bytesReceived(framesCompleted: frames, bufferedBytes: decoder.bufferedBytes, now: now)
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
            if machine.stopReading() { closeAfterWrites(context: context) }
        case is ChannelShouldQuiesceEvent:
            logger.debug("connection.draining")
            if machine.stopReading() { closeAfterWrites(context: context) }
        default:
            context.fireUserInboundEventTriggered(event)
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if machine.writabilityChanged(context.channel.isWritable, now: .now()) { context.read() }
        context.fireChannelWritabilityChanged()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        logger.debug("connection.error", metadata: ["error": "\(error)"])
        machine.closed()
        context.close(promise: nil)
    }

    // MARK: Outbound

    func read(context: ChannelHandlerContext) {
        if machine.readRequested() { context.read() }
    }

    // MARK: Serving

    /// Serves a frame and, while operations answer synchronously, the queued frames that follow it.
    private func serve(_ frame: ByteBuffer, context: ChannelHandlerContext) {
        var frame = frame
        while true {
            guard let response = respond(to: frame, context: context) else { return }
            write(response, context: context)
            let completion = machine.requestFinished(now: .now())
            core.stats.inFlight.subtract()
            perform(completion, context: context)
            guard let next = completion.next else { return }
            frame = next
        }
    }

    /// The response, or `nil` when an asynchronous operation will answer later.
    private func respond(to frame: ByteBuffer, context: ChannelHandlerContext) -> Response? {
        core.stats.inFlight.add()
        let request: Request
        do {
            request = try Request.parse(frame)
        } catch {
            return Response(id: error.id, outcome: .failure(error.error))
        }
        guard let entry = core.operations[request.op] else {
            return Response(id: request.id, outcome: .failure(.unknownOp(request.op)))
        }
        entry.counter.add()
        let requestContext = RequestContext(logger: logger, eventLoop: context.eventLoop)
        switch entry.operation.body {
        case .sync(let body):
            do {
                return Response(id: request.id, outcome: .success(try body(request, requestContext)))
            } catch {
                return Response(id: request.id, outcome: .failure(error))
            }
        case .async(let body):
            let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
            let eventLoop = context.eventLoop
            Task {
                let outcome: Result<[String: JSONValue], ProtocolError>
                do throws(ProtocolError) {
                    outcome = .success(try await body(request, requestContext))
                } catch {
                    outcome = .failure(error)
                }
                let response = Response(id: request.id, outcome: outcome)
                eventLoop.execute { loopBound.value.finishAsync(response) }
            }
            return nil
        }
    }

    private func finishAsync(_ response: Response) {
        core.stats.inFlight.subtract()
        guard let context, machine.state != .closed else {
            // The client is gone; the answer has nowhere to go.
            _ = machine.requestFinished(now: .now())
            return
        }
        write(response, context: context)
        let completion = machine.requestFinished(now: .now())
        flushIfNeeded(context: context)
        perform(completion, context: context)
        if let next = completion.next { serve(next, context: context) }
        flushIfNeeded(context: context)
    }

    private func perform(_ completion: ConnectionStateMachine.Completion, context: ChannelHandlerContext) {
        if completion.read { context.read() }
        if completion.close { closeAfterWrites(context: context) }
    }

    private func write(_ response: Response, context: ChannelHandlerContext) {
        if case .failure(let error) = response.outcome {
            core.stats.countError(error.code)
            logger.debug("request.failed", metadata: ["code": "\(error.code)"])
        }
        var buffer = context.channel.allocator.buffer(capacity: 128)
        FrameEncoder.writeFrame(into: &buffer) { response.write(to: &$0) }
        core.stats.bytesOut.add(buffer.readableBytes)
        context.write(wrapOutboundOut(buffer), promise: nil)
        needsFlush = true
    }

    private func flushIfNeeded(context: ChannelHandlerContext) {
        guard needsFlush, !reading else { return }
        needsFlush = false
        context.flush()
    }

    // MARK: Ending

    private func failFraming(_ error: ProtocolError, context: ChannelHandlerContext) {
        logger.notice("connection.bad_frame", metadata: ["code": "\(error.code)"])
        // The error answers no request, so it takes no in-flight slot.
        core.stats.countError(error.code)
        var buffer = context.channel.allocator.buffer(capacity: 128)
        FrameEncoder.writeFrame(into: &buffer) { Response(id: nil, outcome: .failure(error)).write(to: &$0) }
        core.stats.bytesOut.add(buffer.readableBytes)
        context.write(wrapOutboundOut(buffer), promise: nil)
        needsFlush = true
        if machine.stopReading() { closeAfterWrites(context: context) }
    }

    /// Closes once every response written so far has reached the socket.
    private func closeAfterWrites(context: ChannelHandlerContext) {
        needsFlush = false
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(channel.allocator.buffer(capacity: 0))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }

    // MARK: Timers

    private func armIdleTimer(at deadline: NIODeadline, context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        idleTimer = context.eventLoop.scheduleTask(deadline: deadline) { loopBound.value.idleTimerFired() }
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
        case .disarm:
            break
        }
    }

    private func armFrameTimer(at deadline: NIODeadline, context: ChannelHandlerContext) {
        let loopBound = NIOLoopBound(self, eventLoop: context.eventLoop)
        frameTimer = context.eventLoop.scheduleTask(deadline: deadline) { loopBound.value.frameTimerFired() }
    }

    private func frameTimerFired() {
        frameTimer = nil
        guard let context else { return }
        switch machine.frameTimerFired(now: .now()) {
        case .close:
            logger.notice("connection.frame_timeout", metadata: ["buffered_bytes": "\(decoder.bufferedBytes)"])
            context.close(promise: nil)
        case .rearm(let deadline):
            armFrameTimer(at: deadline, context: context)
        case .disarm:
            break
        }
    }
}
