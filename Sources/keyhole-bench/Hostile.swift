import ArgumentParser
import NIOCore
import NIOPosix
import Synchronization

/// `keyhole-bench hostile`: a client that means harm, for keyholed's robustness tests. Each of its
/// connections makes one attack, then the next connection another, until the time is up: random
/// bytes, frames of random bytes, frames of the maximum size, deeply nested or otherwise bad JSON,
/// frames left half sent, and requests sent without reading their answers.
struct Hostile: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Attack keyholed with malformed, oversized, half-sent and unread traffic (robustness tests).")

    @Option(help: "keyholed's socket.")
    var socket: String

    @Option(help: "Seconds to attack for.")
    var seconds = 30.0

    @Option(help: "Connections attacking at once.")
    var connections = 16

    @Option(help: "keyholed's max_frame_bytes: the size of the largest frames sent.")
    var maxFrameBytes = 65_536

    @Option(help: "Seed of the random choices (default: random).")
    var seed: UInt64?

    @Option(help: "Only these attacks, comma-separated (random_bytes, random_frames, maximum_frames, bad_json, half_frame, unread).")
    var only: String?

    private var attacks: [HostileAttack] {
        guard let only else { return HostileAttack.allCases }
        let names = only.split(separator: ",").map(String.init)
        return HostileAttack.allCases.filter { names.contains($0.description) }
    }

    func validate() throws {
        guard seconds > 0, connections >= 1, maxFrameBytes >= 256 else {
            throw ValidationError("seconds, connections and max-frame-bytes must be positive (max-frame-bytes at least 256)")
        }
        guard !attacks.isEmpty else { throw ValidationError("--only names no attack") }
    }

    func run() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let counters = HostileCounters()
        let deadline = NIODeadline.now() + .nanoseconds(Int64(seconds * 1e9))
        let attacker = HostileAttacker(
            socket: socket, group: group, deadline: deadline, maxFrameBytes: maxFrameBytes, attacks: attacks, counters: counters,
            seed: seed ?? UInt64.random(in: 0...UInt64.max))
        await withTaskGroup(of: Void.self) { tasks in
            for index in 0..<connections {
                tasks.addTask { await attacker.loop(index: index) }
            }
        }
        try await group.shutdownGracefully()
        let made = counters.made.withLock { made in HostileAttack.allCases.map { "\($0)=\(made[$0.rawValue])" } }
        print("hostile: \(counters.connections.load(ordering: .relaxed)) connections, "
            + "\(counters.bytesSent.load(ordering: .relaxed)) bytes sent, "
            + "\(counters.connectFailures.load(ordering: .relaxed)) connects refused; attacks: \(made.joined(separator: " "))")
    }
}

/// The kinds of attack, one per connection.
enum HostileAttack: Int, CaseIterable, CustomStringConvertible {
    case randomBytes, randomFrames, maximumFrames, badJSON, halfFrame, unread

    var description: String {
        switch self {
        case .randomBytes: "random_bytes"
        case .randomFrames: "random_frames"
        case .maximumFrames: "maximum_frames"
        case .badJSON: "bad_json"
        case .halfFrame: "half_frame"
        case .unread: "unread"
        }
    }
}

final class HostileCounters: Sendable {
    let connections = Atomic<Int>(0)
    let connectFailures = Atomic<Int>(0)
    let bytesSent = Atomic<Int>(0)
    /// Attacks made, by kind.
    let made = Mutex([Int](repeating: 0, count: HostileAttack.allCases.count))
}
