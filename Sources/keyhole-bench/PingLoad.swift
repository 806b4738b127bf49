import KeyholeProtocol
import NIOCore
import Synchronization

/// Counters shared by every connection of a run.
final class LoadCounters: Sendable {
    let answered = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let stopped = Atomic<Bool>(false)
}

/// Keeps `depth` requests in flight on one connection: each answer read is replaced by a new request,
/// until the run stops. Requests are one pre-encoded frame, so the client costs little per request.
final class PingLoadHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let frame: ByteBuffer
    private let depth: Int
    private let counters: LoadCounters
    private let finished: EventLoopPromise<Void>
    private var decoder = FrameDecoder(maxFrameBytes: FrameDecoder.limit)
    private var outstanding = 0
    private var toSend = 0

    init(request: Request, depth: Int, counters: LoadCounters, finished: EventLoopPromise<Void>) {
        var frame = ByteBuffer()
        FrameEncoder.writeFrame(into: &frame) { request.write(to: &$0) }
        self.frame = frame
        self.depth = depth
        self.counters = counters
        self.finished = finished
    }

    func channelActive(context: ChannelHandlerContext) {
        toSend = depth
        sendPending(context: context)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        decoder.append(unwrapInboundIn(data))
        do {
            while let body = try decoder.next() {
                outstanding -= 1
                // A success starts with {"id":…,"ok":true; checking for the marker keeps parsing off the client.
                if body.readableBytesView.firstRange(of: #""ok":true"#.utf8) != nil {
                    counters.answered.add(1, ordering: .relaxed)
                } else {
                    counters.failed.add(1, ordering: .relaxed)
                }
                if !counters.stopped.load(ordering: .relaxed) { toSend += 1 }
            }
        } catch {
            counters.failed.add(1, ordering: .relaxed)
            context.close(promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        sendPending(context: context)
        if outstanding == 0 && counters.stopped.load(ordering: .relaxed) {
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        finished.succeed()
    }

    private func sendPending(context: ChannelHandlerContext) {
        guard toSend > 0 else { return }
        var batch = context.channel.allocator.buffer(capacity: frame.readableBytes * toSend)
        for _ in 0..<toSend { batch.writeImmutableBuffer(frame) }
        outstanding += toSend
        toSend = 0
        context.writeAndFlush(wrapOutboundOut(batch), promise: nil)
    }
}
