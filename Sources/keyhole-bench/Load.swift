import ArgumentParser
import KeyholeProtocol
import NIOCore
import NIOPosix

/// `keyhole-bench load`: pipelined requests against a running keyholed.
struct Load: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Drive keyholed with pipelined requests and report throughput."
    )

    @Option(help: "keyholed's socket.")
    var socket: String

    @Option(help: "The operation to send.")
    var op = "ping"

    @Option(help: "Concurrent connections.")
    var connections = 1

    @Option(help: "Requests kept in flight on each connection.")
    var depth = 64

    @Option(help: "Seconds to measure, after one second of warm-up.")
    var seconds = 5.0

    @Option(help: "Client event-loop threads.")
    var threads = 1

    @Flag(help: "Print the result as JSON.")
    var json = false

    func validate() throws {
        guard connections >= 1, depth >= 1, seconds > 0, threads >= 1 else {
            throw ValidationError("connections, depth, seconds and threads must be positive")
        }
    }

    func run() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
        let counters = LoadCounters()
        var finished: [EventLoopFuture<Void>] = []
        for _ in 0..<connections {
            let promise = group.next().makePromise(of: Void.self)
            finished.append(promise.futureResult)
            let request = Request(id: .int(1), op: op)
            _ = try await ClientBootstrap(group: group)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            PingLoadHandler(request: request, depth: depth, counters: counters, finished: promise))
                    }
                }
                .connect(unixDomainSocketPath: socket).get()
        }
        let clock = ContinuousClock()
        try await Task.sleep(for: .seconds(1))
        let startCount = counters.answered.load(ordering: .relaxed)
        let start = clock.now
        try await Task.sleep(for: .seconds(seconds))
        let answered = counters.answered.load(ordering: .relaxed) - startCount
        let elapsed = start.duration(to: clock.now)
        counters.stopped.store(true, ordering: .relaxed)
        for future in finished { try await future.get() }
        try await group.shutdownGracefully()

        let secondsElapsed = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = Double(answered) / secondsElapsed
        let failed = counters.failed.load(ordering: .relaxed)
        if json {
            print(JSONValue.object([
                "op": .string(op), "connections": .int(Int64(connections)), "depth": .int(Int64(depth)),
                "seconds": .double(secondsElapsed), "answered": .int(Int64(answered)),
                "per_second": .int(Int64(rate)), "failed": .int(Int64(failed)),
            ]).jsonText)
        } else {
            print("\(op): \(connections) connection(s) x \(depth) in flight: \(answered) answered in "
                + "\(String(format: secondsElapsed)) s = \(Int(rate)) per second, \(failed) failed")
        }
        if failed > 0 { throw ExitCode(1) }
    }
}

private func String(format seconds: Double) -> String {
    let centis = Int((seconds * 100).rounded())
    return "\(centis / 100).\(centis % 100 < 10 ? "0" : "")\(centis % 100)"
}
