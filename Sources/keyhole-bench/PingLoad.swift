import Histogram
import KeyholeProtocol
import NIOCore
import Synchronization

/// Counters shared by every connection of a run.
final class LoadCounters: Sendable {
    /// Successful answers while measuring (after warm-up, before the stop).
    let answered = Atomic<Int>(0)
    let failed = Atomic<Int>(0)
    let stopped = Atomic<Bool>(false)
    /// Set once warm-up is over: from then on (until `stopped`) latencies are kept.
    let measuring = Atomic<Bool>(false)
    /// The next request of the cycle, shared by every connection.
    let next = Atomic<Int>(0)
    /// Every connection's latencies in microseconds, added in when it closes.
    let latencies = Mutex(Percentiles.histogram())
}

/// Keeps `depth` requests in flight on one connection: each answer read is replaced by a new request,
/// until the run stops. Requests are pre-encoded (keyholed frames, or Redis commands), taken in one
/// cycle shared by every connection (so that with more distinct tokens than keyholed caches, no token
/// is seen again while cached).
final class PingLoadHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let frames: [ByteBuffer]
    private let depth: Int
    private let counters: LoadCounters
    private let finished: EventLoopPromise<Void>
    private var decoder = FrameDecoder(maxFrameBytes: FrameDecoder.limit)
    /// Set when the peer is Redis.
    private var redis: RESPReplyReader?
    private var outstanding = 0
    private var toSend = 0
    /// When each request in flight was sent, oldest first: an answer is matched to the oldest, as
    /// keyholed answers a connection's requests in order when they take alike (and Redis always).
    private var sentTimes = CircularBuffer<NIODeadline>()
    /// When the last request was sent (for pacing).
    private var sentAt: NIODeadline?
    private var latencies = Percentiles.histogram()
    /// At depth 1, at most one request per this long (an open-ended client otherwise).
    private let interval: TimeAmount?
    private var paced = false

    /// A handler sending `frames`: keyholed requests, or with `redis`, Redis commands.
    init(
        frames: [ByteBuffer], redis: Bool, depth: Int, interval: TimeAmount? = nil, counters: LoadCounters,
        finished: EventLoopPromise<Void>
    ) {
        self.frames = frames
        self.redis = redis ? RESPReplyReader() : nil
        self.depth = depth
        self.interval = depth == 1 ? interval : nil
        self.counters = counters
        self.finished = finished
    }

    func channelActive(context: ChannelHandlerContext) {
        toSend = depth
        sendPending(context: context)
    }

    /// `requests` as frames.
    static func frames(_ requests: [Request]) -> [ByteBuffer] {
        requests.map { request in
            var frame = ByteBuffer()
            FrameEncoder.writeFrame(into: &frame) { request.write(to: &$0) }
            return frame
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let bytes = unwrapInboundIn(data)
        if redis != nil { redis!.append(bytes) } else { decoder.append(bytes) }
        do {
            while let succeeded = try nextReply() {
                outstanding -= 1
                let sent = sentTimes.popFirst()
                // Answers are counted where their latency is taken, so that the two always agree.
                let measured = counters.measuring.load(ordering: .relaxed) && !counters.stopped.load(ordering: .relaxed)
                if succeeded {
                    if measured {
                        counters.answered.add(1, ordering: .relaxed)
                        if let sent { _ = latencies.record(UInt64(min(60_000_000, max(0, (NIODeadline.now() - sent).nanoseconds / 1000)))) }
                    }
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

    /// Whether the next whole reply read succeeded; `nil` until more bytes arrive.
    private func nextReply() throws -> Bool? {
        if redis != nil { return try redis!.next().map { $0 == .success } }
        // A success starts with {"id":…,"ok":true; checking for the marker keeps parsing off the client.
        return try decoder.next().map { $0.readableBytesView.firstRange(of: #""ok":true"#.utf8) != nil }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        sendPending(context: context)
        if outstanding == 0 && counters.stopped.load(ordering: .relaxed) {
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        if latencies.totalCount > 0 {
            let mine = latencies
            counters.latencies.withLock { $0.add(mine) }
        }
        finished.succeed()
    }

    private func sendPending(context: ChannelHandlerContext) {
        guard toSend > 0, !paced else { return }
        // Paced: the next request goes one interval after the last one was sent, not sooner.
        if let interval, let sent = sentAt, NIODeadline.now() < sent + interval {
            paced = true
            let loopBound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            context.eventLoop.scheduleTask(deadline: sent + interval) {
                let (handler, context) = loopBound.value
                handler.paced = false
                handler.sendPending(context: context)
            }
            return
        }
        var batch = context.channel.allocator.buffer(capacity: frames[0].readableBytes * toSend)
        if frames.count == 1 {
            for _ in 0..<toSend { batch.writeImmutableBuffer(frames[0]) }
        } else {
            let first = counters.next.add(toSend, ordering: .relaxed).oldValue
            for index in first..<(first + toSend) { batch.writeImmutableBuffer(frames[index % frames.count]) }
        }
        outstanding += toSend
        let now = NIODeadline.now()
        for _ in 0..<toSend { sentTimes.append(now) }
        toSend = 0
        sentAt = now
        context.writeAndFlush(wrapOutboundOut(batch), promise: nil)
    }
}
