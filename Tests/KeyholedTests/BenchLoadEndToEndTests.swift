import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Testing

/// `keyhole-bench load` against a keyholed child: the figures it reports hold together (every measured
/// answer has a latency sample, the percentiles are ordered), and its options are checked before it runs.
@Suite("keyhole-bench load, end to end", .ownThreads)
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

    @Test("session.create at depth 1 with fsync always over three subjects: one sample per answer, sessions spread")
    func durableWrites() async throws {
        let daemon = try DaemonProcess.start(config: "[storage]\nfsync = \"always\"\n")
        let result = try await Self.load([
            "--socket", daemon.socketPath, "--op", "session.create", "--args", #"{"sub":"bench"}"#, "--subjects", "3",
            "--connections", "4", "--depth", "1", "--seconds", "1", "--warmup", "0",
        ])
        try Self.checkLatency(result)
        // --subjects cycles bench-0, bench-1, bench-2 across all connections. Requests answered before the
        // measurement starts or still in flight at its end are stored but not counted.
        let connection = try RawConnection(path: daemon.socketPath)
        let counts = try (0..<4).map { n in
            try connection.result("session.list", ["sub": .string(n < 3 ? "bench-\(n)" : "bench")])["sessions"]?.arrayValue?.count ?? -1
        }
        let answered = try #require(result["answered"]?.intValue)
        #expect(counts[3] == 0)
        #expect(counts[..<3].allSatisfy { abs($0 - counts[0]) <= 1 }, "\(counts)")
        #expect(Int64(counts[..<3].reduce(0, +)) >= answered, "\(counts) for \(answered) answered")
        #expect(try daemon.terminate() == 0)
    }

    @Test("apple.sign_in with --tokens: each token signs its user in, without a code")
    func appleSignIn() async throws {
        let apple = try await FakeApple()
        let daemon = try DaemonProcess.start(config: """
            [[issuer]]
            name = "apple"
            preset = "apple"
            jwks_uri = "\(apple.keySetURL)"
            audiences = ["com.example.app"]

            [apple]

            [storage]
            fsync = "always"
            """)
        let subjects = (0..<3).map { "000\($0).bench.0001" }
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let tokens = directory.appendingPathComponent("tokens.txt")
        try Data(subjects.map { apple.identityToken(sub: $0, audience: "com.example.app") + "\n" }.joined().utf8).write(to: tokens)
        // One connection per token: each is sent at least once, however slow the machine.
        let result = try await Self.load([
            "--socket", daemon.socketPath, "--op", "apple.sign_in", "--tokens", tokens.path, "--connections", "3",
            "--depth", "1", "--seconds", "1", "--warmup", "0",
        ])
        try Self.checkLatency(result)
        #expect(result["op"] == "apple.sign_in")
        let connection = try RawConnection(path: daemon.socketPath)
        for sub in subjects {
            let user = try connection.result("user.get", ["sub": .string(sub), "issuer": "apple"])
            #expect(user["sub"]?.stringValue == sub)
            // A sign-in makes a session each time: at least one per subject.
            let sessions = try connection.result("session.list", ["sub": .string(sub), "issuer": "apple"])["sessions"]?.arrayValue
            #expect((sessions?.count ?? 0) >= 1)
        }
        #expect(try daemon.terminate() == 0)
        try await apple.close()
    }

    @Test("refused up front: bad --subjects, --tokens or --sessions with another op, a bad Redis key prefix or too many keys")
    func badSubjects() async throws {
        for (extra, complaint) in [
            (["--subjects", "0"], "--subjects must be"), (["--subjects", "2", "--args", #"{"sub":5}"#], "sub to be a string"),
            (["--subjects", "2", "--redis", "--op", "SET"], "--redis takes"),
            (["--tokens", "/nonexistent", "--op", "session.create"], "--tokens sends"),
            (["--sessions", "/nonexistent", "--op", "session.create"], "--sessions sends"),
            (["--redis", "--op", "SET", "--key-prefix", "a:b"], "--key-prefix must be"),
            (["--redis", "--op", "SET", "--key-prefix", ""], "--key-prefix must be"),
            (["--redis", "--op", "SET", "--keys", "2000001"], "--keys must be at most"),
        ] {
            let run = try await ChildProcess.runOffPool([Self.bench, "load", "--socket", "/nonexistent"] + extra)
            #expect(run.status == 64, "\(run.stderr)")
            #expect(run.stderr.contains(complaint), "\(run.stderr)")
        }
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
