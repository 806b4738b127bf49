import ArgumentParser
import KeyholeProtocol
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#endif

/// `keyhole-bench load`: pipelined requests against a running keyholed.
struct Load: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Drive keyholed with pipelined requests and report throughput."
    )

    @Option(help: "keyholed's socket.")
    var socket: String

    @Option(help: "The operation to send.")
    var op = "ping"

    @Option(help: "The operation's arguments, a JSON object.")
    var args: String?

    @Option(help: ArgumentHelp(
        "A file of identity tokens, one per line: each request is token.verify of the next one, in one cycle shared by all connections.",
        discussion: """
            With more tokens than keyholed's [tokens] cache_entries, every request misses the cache. With --op apple.sign_in, \
            each request signs in with the next token (as identity_token, without a code) instead.
            """))
    var tokens: String?

    @Option(help: ArgumentHelp(
        "A file of session tokens, one per line: each request is session.get of the next one, in one cycle shared by all connections.",
        discussion: "Scripts/make-bench-sessions.py makes one."))
    var sessions: String?

    @Option(help: ArgumentHelp(
        "Cycle the requests over this many subjects: --args's sub (default \"bench\") followed by -0, -1, ...",
        discussion: "For session.create in long runs: one subject's session list grows with every request, as no real site's does."))
    var subjects: Int?

    @Flag(help: ArgumentHelp(
        "The socket is a Redis server's: send --op GET or SET (keys kh:0, kh:1, ..., see --key-prefix) through the same client, for a comparison on equal terms.",
        discussion: "For GET, fill the keys first: redis-cli -s SOCKET DEBUG POPULATE KEYS kh VALUE-BYTES (redis-server --enable-debug-command yes)."))
    var redis = false

    @Option(help: "With --redis: how many keys the requests cycle over.")
    var keys = 100_000

    @Option(help: ArgumentHelp(
        "With --redis: the keys' prefix, before ':' and the number.",
        discussion: "A prefix no run used before makes every SET create its key, as session.create creates a session."))
    var keyPrefix = "kh"

    @Option(help: "With --redis and --op SET: the value's size in bytes.")
    var valueBytes = 256

    @Option(help: "keyholed's pid: also report its CPU time per answered request and its resident memory (from /proc).")
    var serverPid: Int32?

    @Option(help: "Concurrent connections.")
    var connections = 1

    @Option(help: "Requests kept in flight on each connection.")
    var depth = 64

    @Option(help: ArgumentHelp(
        "With --depth 1: send at most one request per this many milliseconds per connection.",
        discussion: "A steady load, for latency under a given rate rather than at saturation."))
    var intervalMs: Double?

    @Option(help: "Seconds to measure, after the warm-up.")
    var seconds = 5.0

    @Option(help: "Seconds of warm-up, not measured: connections, caches and the server's allocator settle.")
    var warmup = 1.0

    @Option(help: "Client event-loop threads.")
    var threads = 1

    @Flag(help: "Print the result as JSON.")
    var json = false

    private var arguments: [String: JSONValue] {
        guard let args, case .object(let members)? = try? JSONValue.parse(ByteBuffer(string: args)) else { return [:] }
        return members
    }

    /// User plus system CPU seconds of process `pid`, from /proc/PID/stat (fields 14 and 15, in clock ticks).
    static func cpuSeconds(_ pid: Int32) -> Double? {
        guard let file = fopen("/proc/\(pid)/stat", "r") else { return nil }
        defer { fclose(file) }
        var buffer = [UInt8](repeating: 0, count: 1024)
        let count = fread(&buffer, 1, buffer.count, file)
        let line = String(decoding: buffer[..<count], as: UTF8.self)
        // The command name (field 2) may hold spaces; fields after its closing parenthesis are plain.
        guard let close = line.lastIndex(of: ")") else { return nil }
        let fields = line[line.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { return nil }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    /// Resident memory of process `pid` in KiB, from /proc/PID/status (VmRSS).
    static func residentKiB(_ pid: Int32) -> Int? {
        guard let file = fopen("/proc/\(pid)/status", "r") else { return nil }
        defer { fclose(file) }
        var line = [CChar](repeating: 0, count: 256)
        while fgets(&line, Int32(line.count), file) != nil {
            let text = String(decoding: line.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
            guard text.hasPrefix("VmRSS:") else { continue }
            return text.dropFirst(6).split(whereSeparator: { $0 == " " || $0 == "\t" }).first.flatMap { Int($0) }
        }
        return nil
    }

    /// GET or SET of keys `<prefix>:0` to `<prefix>:<keys - 1>`, as RESP commands.
    private func redisCommands() -> [ByteBuffer] {
        let value = [UInt8](repeating: UInt8(ascii: "x"), count: valueBytes)
        let isSet = op.uppercased() == "SET"
        return (0..<keys).map { n in
            let key = Array("\(keyPrefix):\(n)".utf8)
            return RESPReplyReader.command(isSet ? [Array("SET".utf8), key, value] : [Array("GET".utf8), key])
        }
    }

    /// The non-empty lines of `path`.
    static func readTokens(_ path: String) throws -> [String] {
        guard let file = fopen(path, "r") else { throw ValidationError("cannot open \(path)") }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1 << 16)
        while true {
            let count = fread(&chunk, 1, chunk.count, file)
            guard count > 0 else { break }
            bytes += chunk[..<count]
        }
        let lines = bytes.split(separator: UInt8(ascii: "\n")).map { String(decoding: $0, as: UTF8.self) }.filter { !$0.isEmpty }
        guard !lines.isEmpty else { throw ValidationError("\(path) holds no token") }
        return lines
    }

    func validate() throws {
        if let args, case .object? = try? JSONValue.parse(ByteBuffer(string: args)) {} else if args != nil {
            throw ValidationError("--args must be a JSON object")
        }
        if tokens != nil && sessions != nil { throw ValidationError("--tokens and --sessions exclude each other") }
        if sessions != nil, !["ping", "session.get"].contains(op) {
            throw ValidationError("--sessions sends session.get")
        }
        if tokens != nil, !["ping", "token.verify", "apple.sign_in"].contains(op) {
            throw ValidationError("--tokens sends token.verify or, with --op apple.sign_in, apple.sign_in")
        }
        if let subjects {
            // Each subject is a request made and encoded up front: a million is about 100 MB.
            guard subjects >= 1, subjects <= 1_000_000 else { throw ValidationError("--subjects must be from 1 to 1000000") }
            guard tokens == nil, sessions == nil else { throw ValidationError("--subjects excludes --tokens and --sessions") }
            if let sub = arguments["sub"], sub.stringValue == nil {
                throw ValidationError("--subjects needs --args's sub to be a string")
            }
        }
        if redis {
            guard tokens == nil, sessions == nil, args == nil, subjects == nil else {
                throw ValidationError("--redis takes neither --tokens, --sessions, --args nor --subjects")
            }
            guard ["GET", "SET"].contains(op.uppercased()) else { throw ValidationError("--redis sends --op GET or SET") }
            guard keys >= 1, valueBytes >= 1 else { throw ValidationError("--keys and --value-bytes must be positive") }
            // Every command is made up front: 2M SETs of 256 bytes are about 600 MB.
            guard keys <= 2_000_000 else { throw ValidationError("--keys must be at most 2000000") }
            guard (1...32).contains(keyPrefix.utf8.count),
                keyPrefix.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: ":") })
            else { throw ValidationError("--key-prefix must be 1 to 32 printable ASCII characters, without spaces or ':'") }
        }
        if let intervalMs, !(intervalMs > 0 && depth == 1) {
            throw ValidationError("--interval-ms must be positive, and needs --depth 1")
        }
        guard connections >= 1, depth >= 1, seconds > 0, threads >= 1 else {
            throw ValidationError("connections, depth, seconds and threads must be positive")
        }
        guard warmup >= 0, warmup <= 3600 else { throw ValidationError("--warmup must be from 0 to 3600 seconds") }
    }

    func run() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
        let counters = LoadCounters()
        // Parsed once: each token's and each subject's request starts from it.
        let arguments = self.arguments
        // --op's default (ping) with --tokens means token.verify.
        let (tokenOp, tokenArgument) = op == "apple.sign_in" ? (op, "identity_token") : ("token.verify", "token")
        let requests = try tokens.map(Self.readTokens)?.map { token in
            var args = arguments
            args[tokenArgument] = .string(token)
            return Request(id: .int(1), op: tokenOp, args: args)
        } ?? sessions.map(Self.readTokens)?.map { session in
            Request(id: .int(1), op: "session.get", args: ["session": .string(session)])
        } ?? subjects.map { count in
            var args = arguments
            let base = if case .string(let sub)? = args["sub"] { sub } else { "bench" }
            return (0..<count).map { n in
                args["sub"] = .string("\(base)-\(n)")
                return Request(id: .int(1), op: self.op, args: args)
            }
        } ?? [Request(id: .int(1), op: op, args: arguments)]
        let frames = redis ? redisCommands() : PingLoadHandler.frames(requests)
        let op = redis ? "redis " + op.uppercased() : tokens != nil ? tokenOp : sessions != nil ? "session.get" : op
        var finished: [EventLoopFuture<Void>] = []
        for _ in 0..<connections {
            let promise = group.next().makePromise(of: Void.self)
            finished.append(promise.futureResult)
            _ = try await ClientBootstrap(group: group)
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(
                            PingLoadHandler(
                                frames: frames, redis: redis, depth: depth,
                                interval: intervalMs.map { .nanoseconds(Int64($0 * 1e6)) }, counters: counters, finished: promise))
                    }
                }
                .connect(unixDomainSocketPath: socket).get()
        }
        let clock = ContinuousClock()
        try await Task.sleep(for: .seconds(warmup))
        let startCPU = serverPid.flatMap(Self.cpuSeconds)
        let start = clock.now
        counters.measuring.store(true, ordering: .relaxed)
        try await Task.sleep(for: .seconds(seconds))
        counters.stopped.store(true, ordering: .relaxed)
        let endCPU = serverPid.flatMap(Self.cpuSeconds)
        let serverCPU = startCPU.flatMap { start in endCPU.map { $0 - start } }
        let serverRSS = serverPid.flatMap(Self.residentKiB)
        let elapsed = start.duration(to: clock.now)
        for future in finished { try await future.get() }
        let answered = counters.answered.load(ordering: .relaxed)
        try await group.shutdownGracefully()

        let secondsElapsed = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let rate = Double(answered) / secondsElapsed
        let failed = counters.failed.load(ordering: .relaxed)
        let latency = counters.latencies.withLock { Percentiles($0) }
        let cpuPerRequest = serverCPU.flatMap { answered > 0 ? Double(Int(($0 / Double(answered) * 1e8).rounded())) / 100 : nil }
        if json {
            var result: [String: JSONValue] = [
                "op": .string(op), "connections": .int(Int64(connections)), "depth": .int(Int64(depth)),
                "seconds": .double(secondsElapsed), "answered": .int(Int64(answered)),
                "per_second": .int(Int64(rate)), "failed": .int(Int64(failed)),
            ]
            if let latency { result["latency_us"] = latency.json }
            if let cpuPerRequest { result["server_cpu_us_per_request"] = .double(cpuPerRequest) }
            if let serverRSS { result["server_rss_kib"] = .int(Int64(serverRSS)) }
            print(JSONValue.object(result).jsonText)
        } else {
            print("\(op): \(connections) connection(s) x \(depth) in flight: \(answered) answered in "
                + "\(String(format: secondsElapsed)) s = \(Int(rate)) per second, \(failed) failed")
            if let latency { print("latency: \(latency)") }
            if let cpuPerRequest { print("server CPU: \(cpuPerRequest) µs per answered request") }
            if let serverRSS { print("server resident memory: \(serverRSS) KiB") }
        }
        if failed > 0 { throw ExitCode(1) }
    }
}

private func String(format seconds: Double) -> String {
    let centis = Int((seconds * 100).rounded())
    return "\(centis / 100).\(centis % 100 < 10 ? "0" : "")\(centis % 100)"
}
