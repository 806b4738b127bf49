import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Testing

/// `keyhole-bench load` against a keyholed child and against a stand-in Redis: the figures it reports
/// hold together (every measured answer has a latency sample, the percentiles are ordered).
@Suite("keyhole-bench load, end to end")
struct BenchLoadEndToEndTests {
    static let bench = ChildProcess.builtProduct("keyhole-bench").path

    static func load(_ arguments: [String]) async throws -> JSONValue {
        let run = try await ChildProcess.runOffPool([bench, "load"] + arguments + ["--json"])
        #expect(run.status == 0, "\(run.stdout)\(run.stderr)")
        return try JSONValue.parse(ByteBuffer(string: run.stdout))
    }

    static func checkLatency(_ result: JSONValue) throws {
        let answered = try #require(result["answered"]?.intValue)
        #expect(answered > 0)
        #expect(result["failed"] == 0)
        let latency = try #require(result["latency_us"])
        // Each answer measured is one sample, whatever the depth.
        #expect(latency["samples"]?.intValue == answered)
        let figures = try ["p50", "p90", "p99", "p99_9", "max"].map { try #require(latency[$0]?.intValue) }
        #expect(figures == figures.sorted(), "\(latency.jsonText)")
        #expect(figures[0] > 0)
    }

    @Test("pipelined requests at depth 8: a latency sample per answer, percentiles in order, warm-up not counted")
    func pipelinedLatency() async throws {
        let daemon = try DaemonProcess.start(config: "")
        let result = try await Self.load([
            "--socket", daemon.socketPath, "--connections", "2", "--depth", "8", "--seconds", "1", "--warmup", "0.2",
            "--server-pid", "\(daemon.pid)",
        ])
        try Self.checkLatency(result)
        #expect(result["depth"] == 8)
        #expect((result["server_cpu_us_per_request"]?.doubleValue ?? 0) > 0)
        #expect(try daemon.terminate() == 0)
    }

    @Test("session.create at depth 1 with fsync always: one sample per answer")
    func durableWrites() async throws {
        let daemon = try DaemonProcess.start(config: "[storage]\nfsync = \"always\"\n")
        let result = try await Self.load([
            "--socket", daemon.socketPath, "--op", "session.create", "--args", #"{"sub":"bench"}"#, "--connections", "4",
            "--depth", "1", "--seconds", "1", "--warmup", "0",
        ])
        try Self.checkLatency(result)
        #expect(try daemon.terminate() == 0)
    }

    @Test("a negative or huge warm-up is refused")
    func badWarmup() async throws {
        for warmup in ["-1", "4000"] {
            let run = try await ChildProcess.runOffPool([Self.bench, "load", "--socket", "/nonexistent", "--warmup", warmup])
            #expect(run.status == 64, "\(run.stderr)")
            #expect(run.stderr.contains("--warmup"))
        }
    }
}
