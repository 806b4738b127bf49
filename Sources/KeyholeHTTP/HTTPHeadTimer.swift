import NIOCore

/// Times a connection before its HTTP decoder sees the bytes (HTTP.md, "Configuration"): a connection
/// with no request under way is closed after the idle timeout; once a request's first byte is in, its
/// head must be whole within the head timeout, else it is answered 408 and closed. The connection
/// handler says when a head arrived and when its answer went out. All on the channel's event loop.
///
/// A request only notes the time: one check, every half of the shorter timeout, enforces both, so a
/// keep-alive connection costs no timer per request (each would be a scheduled task made and
/// cancelled). A deadline is thus met within half the shorter timeout after it passes.
final class HTTPHeadTimer: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum State {
        /// Between requests, since then.
        case idle(since: NIODeadline)
        /// A request's first bytes are in, not yet its whole head.
        case receiving(since: NIODeadline)
        /// A head is in and not yet answered; `sawBytes` when more came meanwhile (a pipelined
        /// request, or a body the answer will close the connection on).
        case busy(sawBytes: Bool)
        /// The last answer (or a 408) is on its way, since then: a client that does not read it
        /// does not hold the connection past the head timeout.
        case closing(since: NIODeadline)
    }

    private let idleTimeout: TimeAmount
    private let headTimeout: TimeAmount
    private var state = State.idle(since: .now())
    private var check: Scheduled<Void>?

    init(idleTimeout: TimeAmount, headTimeout: TimeAmount) {
        self.idleTimeout = idleTimeout
        self.headTimeout = headTimeout
    }

    private var period: TimeAmount { .nanoseconds(max(1_000_000, min(idleTimeout, headTimeout).nanoseconds / 2)) }

    func handlerAdded(context: ChannelHandlerContext) {
        state = .idle(since: .now())
        scheduleCheck(context: context)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        check?.cancel()
        check = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        check?.cancel()
        check = nil
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch state {
        case .idle: state = .receiving(since: .now())
        case .receiving, .busy(sawBytes: true), .closing: break
        case .busy(sawBytes: false): state = .busy(sawBytes: true)
        }
        context.fireChannelRead(data)
    }

    /// A whole head reached the handler: no deadline runs until it is answered.
    func headArrived() {
        state = .busy(sawBytes: false)
    }

    /// The connection's last answer is being written: it is closed once written, or after the head
    /// timeout if the client does not take it.
    func closing() {
        state = .closing(since: .now())
    }

    /// The answer went out: wait for the next request (whose bytes may be in already).
    func answered() {
        guard case .busy(let sawBytes) = state else { return }
        state = sawBytes ? .receiving(since: .now()) : .idle(since: .now())
    }

    private func scheduleCheck(context: ChannelHandlerContext) {
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        check = context.eventLoop.scheduleTask(in: period) {
            let (timer, context) = bound.value
            timer.checkDeadlines(context: context)
        }
    }

    private func checkDeadlines(context: ChannelHandlerContext) {
        check = nil
        let now = NIODeadline.now()
        switch state {
        case .idle(let since) where now - since >= idleTimeout:
            context.close(promise: nil)
            return
        case .receiving(let since) where now - since >= headTimeout:
            // Straight to the socket, past the decoder, which holds a part of a head.
            var bytes = context.channel.allocator.buffer(capacity: 128)
            bytes.writeString("HTTP/1.1 408 Request Timeout\r\nCache-Control: no-store\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(bytes)).whenComplete { _ in channel.close(promise: nil) }
            state = .closing(since: now)
        case .closing(let since) where now - since >= headTimeout:
            // The client does not take its last answer: its slot is not held for it.
            context.close(promise: nil)
            return
        default:
            break
        }
        guard context.channel.isActive else { return }
        scheduleCheck(context: context)
    }
}
