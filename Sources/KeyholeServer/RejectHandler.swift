import KeyholeProtocol
import NIOCore

/// Answers a connection beyond `max_connections` with `overloaded` and closes it, reading nothing.
final class RejectHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let stats: ServerStats

    init(stats: ServerStats) { self.stats = stats }

    /// Writes the answer a connection beyond `max_connections` gets (on either loop), counted in `stats`.
    static func writeRefusal(into buffer: inout ByteBuffer, stats: ServerStats) {
        let error = ProtocolError.overloaded("too many connections")
        stats.countError(error.code)
        let before = buffer.readableBytes
        FrameEncoder.writeFrame(into: &buffer) { Response(id: nil, outcome: .failure(error)).write(to: &$0) }
        stats.bytesOut.add(buffer.readableBytes - before)
    }

    func channelActive(context: ChannelHandlerContext) {
        var buffer = context.channel.allocator.buffer(capacity: 128)
        Self.writeRefusal(into: &buffer, stats: stats)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(buffer)).whenComplete { _ in channel.close(promise: nil) }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
}
