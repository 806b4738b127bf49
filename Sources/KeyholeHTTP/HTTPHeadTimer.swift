import NIOCore

/// Times a connection before its HTTP decoder sees the bytes (HTTP.md, "Configuration"): a connection
/// with no request under way is closed after the idle timeout; once a request's first byte is in, its
/// head must be whole within the head timeout, else it is answered 408 and closed. The connection
/// handler says when a head arrived and when its answer went out. All on the channel's event loop.
final class HTTPHeadTimer: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private enum State {
        /// Between requests: the idle timer runs.
        case idle
        /// A request's first bytes are in, not yet its whole head: the head timer runs.
        case receiving
        /// A head is in and not yet answered; `sawBytes` when more came meanwhile (a pipelined
        /// request, or a body the answer will close the connection on).
        case busy(sawBytes: Bool)
    }

    private let idleTimeout: TimeAmount
    private let headTimeout: TimeAmount
    private var state = State.idle
    private var timer: Scheduled<Void>?
    private var context: ChannelHandlerContext?

    init(idleTimeout: TimeAmount, headTimeout: TimeAmount) {
        self.idleTimeout = idleTimeout
        self.headTimeout = headTimeout
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
        arm(idleTimeout, context: context, expired: .idle)
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        timer?.cancel()
        self.context = nil
    }

    func channelInactive(context: ChannelHandlerContext) {
        timer?.cancel()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch state {
        case .idle:
            state = .receiving
            arm(headTimeout, context: context, expired: .receiving)
        case .receiving, .busy(sawBytes: true):
            break
        case .busy(sawBytes: false):
            state = .busy(sawBytes: true)
        }
        context.fireChannelRead(data)
    }

    /// A whole head reached the handler: no timer runs until it is answered.
    func headArrived() {
        timer?.cancel()
        timer = nil
        state = .busy(sawBytes: false)
    }

    /// The answer went out: wait for the next request (whose bytes may be in already).
    func answered() {
        guard case .busy(let sawBytes) = state, let context else { return }
        if sawBytes {
            state = .receiving
            arm(headTimeout, context: context, expired: .receiving)
        } else {
            state = .idle
            arm(idleTimeout, context: context, expired: .idle)
        }
    }

    private func arm(_ timeout: TimeAmount, context: ChannelHandlerContext, expired: State) {
        timer?.cancel()
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        timer = context.eventLoop.scheduleTask(in: timeout) {
            let (handler, context) = bound.value
            handler.expire(context: context, was: expired)
        }
    }

    private func expire(context: ChannelHandlerContext, was: State) {
        timer = nil
        switch (state, was) {
        case (.idle, .idle):
            context.close(promise: nil)
        case (.receiving, .receiving):
            // Straight to the socket, past the decoder, which holds a part of a head.
            var bytes = context.channel.allocator.buffer(capacity: 128)
            bytes.writeString("HTTP/1.1 408 Request Timeout\r\nCache-Control: no-store\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(bytes)).whenComplete { _ in channel.close(promise: nil) }
        default:
            break
        }
    }
}
