import ArgumentParser
import KeyholeProtocol
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// `keyhole-bench floor-server`: the least a SwiftNIO server on keyholed's framing can cost per request.
///
/// It cuts frames as keyholed does and answers each with one canned success frame, without parsing
/// JSON or doing any work. `keyhole-bench load --server-pid` against it gives the CPU time per request
/// of the event loop, the framing and the socket calls alone: the floor under every keyholed operation,
/// to set next to Redis's time per GET.
struct FloorServer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "floor-server",
        abstract: "Answer every frame with a canned success, to measure SwiftNIO's own cost per request.",
        discussion: "Runs until interrupted. Drive it with: keyhole-bench load --socket PATH --server-pid PID"
    )

    @Option(help: "The socket to listen on (whatever is at that path is removed first: a bench tool's socket only).")
    var socket: String

    @Option(help: "The size of each answer's body in bytes (session.get's answer with a user is about 420).")
    var replyBytes = 420

    @Option(help: "Event-loop threads: keyholed's default on a 2-core machine is 1 (half the cores).")
    var threads = 1

    func validate() throws {
        try Self.validate(replyBytes: replyBytes)
        guard threads >= 1 else { throw ValidationError("--threads must be positive") }
    }

    /// The smallest answer is {"id":1,"ok":true,"result":{"pad":""}}: 38 bytes.
    static func validate(replyBytes: Int) throws {
        guard replyBytes >= 38, replyBytes <= FrameDecoder.limit else {
            throw ValidationError("--reply-bytes must be 38 to \(FrameDecoder.limit)")
        }
    }

    /// The canned answer, framed: a success whose body is `replyBytes` long.
    static func reply(bytes replyBytes: Int) -> ByteBuffer {
        var body = ByteBuffer(string: #"{"id":1,"ok":true,"result":{"pad":""#)
        body.writeRepeatingByte(UInt8(ascii: "x"), count: max(0, replyBytes - body.readableBytes - 3))
        body.writeString(#""}}"#)
        var reply = ByteBuffer()
        FrameEncoder.writeFrame(into: &reply) { $0.writeImmutableBuffer(body) }
        return reply
    }

    func run() async throws {
        let reply = Self.reply(bytes: replyBytes)
        unlink(socket)
        let canned = reply
        // Not the singleton group (a loop per core): keyholed runs half as many, and so must the floor.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
        let channel = try await ServerBootstrap(group: group)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(FloorHandler(reply: canned))
                }
            }
            .bind(unixDomainSocketPath: socket).get()
        print("floor-server: pid \(getpid()), socket \(socket), \(reply.readableBytes) bytes per answer")
        try await channel.closeFuture.get()
    }
}

/// Cuts frames and answers each with the same bytes, flushing once per read as keyholed does.
private final class FloorHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private let reply: ByteBuffer
    private var decoder = FrameDecoder(maxFrameBytes: 1 << 20)
    private var needsFlush = false

    init(reply: ByteBuffer) {
        self.reply = reply
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        decoder.append(unwrapInboundIn(data))
        do {
            while try decoder.next() != nil {
                // The canned answer is shared, never copied: the cheapest write NIO offers.
                context.write(wrapOutboundOut(reply), promise: nil)
                needsFlush = true
            }
        } catch {
            context.close(promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        guard needsFlush else { return }
        needsFlush = false
        context.flush()
    }
}
