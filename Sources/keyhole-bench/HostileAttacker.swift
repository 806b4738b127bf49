import NIOCore
import NIOPosix

/// Runs attacks on one connection after another until the deadline (see `Hostile`).
struct HostileAttacker: Sendable {
    let socket: String
    let group: any EventLoopGroup
    let deadline: NIODeadline
    let maxFrameBytes: Int
    let attacks: [HostileAttack]
    let counters: HostileCounters
    let seed: UInt64
    /// Random bytes made once, sliced for each attack: the attacker's CPU should go on sending, not on
    /// making noise (it shares the host with keyholed and the clients whose latency is measured).
    let noise: [UInt8]

    init(
        socket: String, group: any EventLoopGroup, deadline: NIODeadline, maxFrameBytes: Int, attacks: [HostileAttack],
        counters: HostileCounters, seed: UInt64
    ) {
        self.attacks = attacks
        self.socket = socket
        self.group = group
        self.deadline = deadline
        self.maxFrameBytes = maxFrameBytes
        self.counters = counters
        self.seed = seed
        var random = SplitMix64(seed: seed)
        var noise = [UInt8](repeating: 0, count: 1 << 20)
        for index in stride(from: 0, to: noise.count, by: 8) {
            withUnsafeBytes(of: random.next()) { noise.replaceSubrange(index..<index + 8, with: $0) }
        }
        self.noise = noise
    }

    /// `count` bytes of noise from a random place.
    private func noise(_ count: Int, random: inout SplitMix64) -> ArraySlice<UInt8> {
        let start = Int.random(in: 0...(noise.count - count), using: &random)
        return noise[start..<start + count]
    }

    func loop(index: Int) async {
        var random = SplitMix64(seed: seed &+ UInt64(index) &* 0x9E37_79B9_7F4A_7C15)
        while NIODeadline.now() < deadline {
            let attack = attacks.randomElement(using: &random)!
            let channel: any Channel
            do {
                channel = try await ClientBootstrap(group: group)
                    // The unread attack never reads what keyholed answers.
                    .channelOption(.autoRead, value: attack != .unread)
                    .channelInitializer { channel in
                        channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(Discard()) }
                    }
                    .connect(unixDomainSocketPath: socket).get()
            } catch {
                counters.connectFailures.add(1, ordering: .relaxed)
                try? await Task.sleep(for: .milliseconds(10))
                continue
            }
            counters.connections.add(1, ordering: .relaxed)
            counters.made.withLock { $0[attack.rawValue] += 1 }
            let bytes = payload(attack, random: &random)
            counters.bytesSent.add(bytes.count, ordering: .relaxed)
            channel.writeAndFlush(ByteBuffer(bytes: bytes), promise: nil)
            // How long the connection is kept: a half frame for seconds (keyholed's frame_timeout
            // may end it first), so that many are held at once without stalling every loop.
            let hold: NIODeadline
            switch attack {
            case .halfFrame: hold = min(deadline, .now() + .seconds(3))
            case .unread: hold = min(deadline, .now() + .seconds(1))
            default: hold = min(deadline, .now() + .milliseconds(200))
            }
            let timer = channel.eventLoop.scheduleTask(deadline: hold) { channel.close(promise: nil) }
            try? await channel.closeFuture.get()
            timer.cancel()
        }
    }

    /// The bytes `attack` sends.
    func payload(_ attack: HostileAttack, random: inout SplitMix64) -> [UInt8] {
        switch attack {
        case .randomBytes:
            return Array(noise(Int.random(in: 1...4096, using: &random), random: &random))
        case .randomFrames:
            var bytes: [UInt8] = []
            for _ in 0..<Int.random(in: 1...32, using: &random) {
                bytes += frame(Array(noise(Int.random(in: 1...2048, using: &random), random: &random)))
            }
            return bytes
        case .maximumFrames:
            // Frames of exactly the limit, and now and then one byte over it (frame_too_large).
            var bytes: [UInt8] = []
            for _ in 0..<Int.random(in: 1...3, using: &random) {
                let size = Int.random(in: 0..<4, using: &random) == 0 ? maxFrameBytes + 1 : maxFrameBytes
                let head = Array(#"{"op":"token.verify","args":{"token":""#.utf8)
                let tail = Array(#""}}"#.utf8)
                let filler = noise(size - head.count - tail.count, random: &random).map { UInt8(ascii: "A") + $0 % 26 }
                bytes += frame(head + filler + tail)
            }
            return bytes
        case .badJSON:
            var bytes: [UInt8] = []
            for _ in 0..<Int.random(in: 1...16, using: &random) {
                bytes += frame(Array(Self.badRequests.randomElement(using: &random)!.utf8))
            }
            bytes += frame([0xC0, 0xAF, 0xFF, 0xFE])
            return bytes
        case .halfFrame:
            let length = Int.random(in: 100...maxFrameBytes, using: &random)
            let sent = Int.random(in: 0..<length, using: &random)
            return header(length) + [UInt8](repeating: UInt8(ascii: "{"), count: sent)
        case .unread:
            var bytes: [UInt8] = []
            for _ in 0..<500 { bytes += frame(Array(#"{"op":"ping","id":1}"#.utf8)) }
            return bytes
        }
    }

    static let badRequests: [String] = [
        String(repeating: "[", count: 40) + String(repeating: "]", count: 40),
        "{\"op\":\"ping\",\"args\":" + String(repeating: "{\"a\":", count: 40) + "1" + String(repeating: "}", count: 40) + "}",
        #"{"op":"ping","op":"stats"}"#, #"{"op":"ping","id":1e999999}"#, #"{"op":"ping","id":"#, #"{"op":"\ud800"}"#,
        #"{"op":"session.get","args":{"session":"kh_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}"#,
        #"{"op":"session.get","args":{"session":7}}"#, #"{"op":"token.verify","args":{"token":"a.b.c"}}"#,
        #"{"op":"session.create","args":{"sub":"","data":[1]}}"#, #"{"op":"admin.snapshot"}"#, #"{"op":"user.delete","args":{"sub":"x"}}"#,
        #"{"op":"no.such.op","v":2}"#, #"{"v":1}"#, "null", "[]", "\"x\"", #"{"op":"ping","args":{"x":1}}"#, "{} {}",
    ]

    private func header(_ length: Int) -> [UInt8] {
        [UInt8(truncatingIfNeeded: length >> 24), UInt8(truncatingIfNeeded: length >> 16),
         UInt8(truncatingIfNeeded: length >> 8), UInt8(truncatingIfNeeded: length)]
    }

    private func frame(_ body: [UInt8]) -> [UInt8] { header(body.count) + body }
}

/// Reads and drops whatever keyholed answers.
private final class Discard: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    func channelRead(context: ChannelHandlerContext, data: NIOAny) {}
    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
}

/// A small seeded generator, so that a run can be repeated with `--seed`.
struct SplitMix64: RandomNumberGenerator {
    private var state: UInt64

    init(seed: UInt64) { state = seed }

    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
