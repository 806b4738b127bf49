import KeyholeProtocol
import NIOCore

/// Answers a connection beyond `max_connections` with `overloaded` and closes it, reading nothing.
final class RejectHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let stats: ServerStats

    init(stats: ServerStats) { self.stats = stats }

    func channelActive(context: ChannelHandlerContext) {
        let error = ProtocolError.overloaded("too many connections")
        stats.countError(error.code)
        var buffer = context.channel.allocator.buffer(capacity: 128)
        FrameEncoder.writeFrame(into: &buffer) { Response(id: nil, outcome: .failure(error)).write(to: &$0) }
        stats.bytesOut.add(buffer.readableBytes)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(buffer)).whenComplete { _ in channel.close(promise: nil) }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
}
