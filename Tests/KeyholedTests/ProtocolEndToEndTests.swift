import Foundation
import KeyholeClient
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Testing

/// keyholed as a child process, spoken to over its socket as a client in any language would.
@Suite("keyholed protocol, end to end", .serialized, .ownThreads)
struct ProtocolEndToEndTests {
    @Test("ping and stats through the Swift client")
    func pingAndStats() async throws {
        let daemon = try DaemonProcess.start()
        let client = try await KeyholeClient.connect(socketPath: daemon.socketPath)
        let pong = try await client.ping()
        #expect(pong.protocolVersion == 1)
        #expect(pong.version == KeyholeVersion.current)
        let stats = try await client.stats()
        #expect(stats["requests"]?["ping"] == 1)
        #expect(stats["connections"]?["open"] == 1)
        #expect(stats["bytes"]?["in"]?.intValue ?? 0 > 0)
        try await client.close()
        #expect(try daemon.terminate() == 0)
    }

    @Test("stats' bytes out counts every answer's frame, header included, as sent before it was asked")
    func bytesOut() throws {
        let daemon = try DaemonProcess.start()
        let connection = try RawConnection(path: daemon.socketPath)
        func stats() throws -> (out: Int64, frame: Int) {
            try connection.sendFrame(#"{"op":"stats","id":1}"#)
            let frame = try #require(try connection.readFrame())
            let out = try JSONValue.parse(ByteBuffer(bytes: frame))["result"]?["bytes"]?["out"]?.intValue
            return (try #require(out), frame.count + 4)
        }
        let first = try stats()
        try connection.sendFrame(#"{"op":"ping","id":2}"#)
        let ping = try #require(try connection.readFrame()).count + 4
        let second = try stats()
        // Between the two: the first stats' answer and the ping's, whole; never the asking one's own.
        #expect(second.out - first.out == Int64(first.frame + ping))
        #expect(try daemon.terminate() == 0)
    }

    @Test("every request vector gets its exact response, and the connection stays open")
    func requestVectors() throws {
        let daemon = try DaemonProcess.start(arguments: [])
        for vector in try Vectors.load("requests.json") {
            let name = vector["name"]!.stringValue!
            let connection = try RawConnection(path: daemon.socketPath)
            if let text = vector["request"]?.stringValue {
                try connection.sendFrame(text)
            } else {
                try connection.sendFrame(RawConnection.bytes(hex: vector["request_hex"]!.stringValue!))
            }
            let response = try connection.readResponse()
            let expect = vector["expect"]!
            #expect(response["id"] == expect["id"], "\(name)")
            #expect(response["ok"] == expect["ok"], "\(name)")
            if let code = expect["code"] {
                #expect(response["error"]?["code"] == code, "\(name)")
                #expect(response["error"]?["message"]?.stringValue?.isEmpty == false, "\(name)")
            }
            if let keys = expect["result_keys"]?.arrayValue {
                #expect(response["result"]?.objectValue?.keys.sorted() == keys.compactMap(\.stringValue), "\(name)")
            }
            try connection.sendFrame(#"{"op":"ping","id":"after"}"#)
            #expect(try connection.readResponse()["id"] == "after", "\(name): connection must stay open")
        }
        #expect(try daemon.terminate() == 0)
    }

    @Test("every framing vector a server can be configured for: answers, then the error and a close")
    func framingVectors() throws {
        let daemon = try DaemonProcess.start(arguments: [])
        for vector in try Vectors.load("framing.json") where vector["max_frame_bytes"] == 65536 {
            let name = vector["name"]!.stringValue!
            let frames = vector["frames_hex"]!.arrayValue!.count
            let error = vector["error"]?.stringValue
            let connection = try RawConnection(path: daemon.socketPath)
            try connection.send(hex: vector["input_hex"]!.stringValue!)
            var responses: [JSONValue] = []
            for _ in 0..<(frames + (error == nil ? 0 : 1)) { responses.append(try connection.readResponse()) }
            if let error {
                let last = responses.removeLast()
                #expect(last["error"]?["code"] == .string(error), "\(name)")
                #expect(last["id"] == .null, "\(name)")
                #expect(try connection.readsEndOfStream(), "\(name): the server must close after \(error)")
            } else if vector["remainder"] == 0 {
                // Framing is intact: the connection still serves.
                try connection.sendFrame(#"{"op":"ping","id":"next"}"#)
                #expect(try connection.readResponse()["id"] == "next", "\(name)")
            }
            #expect(responses.count == frames, "\(name)")
        }
        #expect(try daemon.terminate() == 0)
    }

    @Test("an oversized length is refused on its header alone: the body is never awaited")
    func frameTooLargeWithoutBody() throws {
        let daemon = try DaemonProcess.start(config: "[server]\nmax_frame_bytes = \"1KiB\"\n")
        let connection = try RawConnection(path: daemon.socketPath)
        try connection.send([0x00, 0x00, 0x04, 0x01])
        let response = try connection.readResponse()
        #expect(response["error"]?["code"] == "frame_too_large")
        #expect(try connection.readsEndOfStream())
        // 0xFFFFFFFF too, whatever the limit.
        let second = try RawConnection(path: daemon.socketPath)
        try second.send([0xFF, 0xFF, 0xFF, 0xFF])
        #expect(try second.readResponse()["error"]?["code"] == "frame_too_large")
        // Each error response is counted once.
        let observer = try RawConnection(path: daemon.socketPath)
        try observer.sendFrame(#"{"op":"stats","id":1}"#)
        #expect(try observer.readResponse()["result"]?["errors"] == ["frame_too_large": 2])
        #expect(try daemon.terminate() == 0)
    }

    @Test("10 000 pipelined requests on one connection: each answered exactly once with its own id")
    func pipelined10k() throws {
        let daemon = try DaemonProcess.start()
        let connection = try RawConnection(path: daemon.socketPath)
        let count = 10_000
        let writerError = WriterResult()
        // Write on another thread: the server pushes back (max_in_flight) until we read.
        let writer = Thread {
            do {
                var batch: [UInt8] = []
                for i in 0..<count {
                    let id = i % 2 == 0 ? "\(i)" : "\"s\(i)\""
                    let op = i % 3 == 0 ? #""debug.echo","args":{"i":\#(i)}"# : #""ping""#
                    let body = Array(#"{"op":\#(op),"id":\#(id)}"#.utf8)
                    batch += withUnsafeBytes(of: UInt32(body.count).bigEndian, Array.init) + body
                    if batch.count > 16_384 {
                        try connection.send(batch)
                        batch.removeAll(keepingCapacity: true)
                    }
                }
                try connection.send(batch)
            } catch {
                writerError.set("\(error)")
            }
        }
        writer.start()
        var seen = Set<JSONValue>()
        for _ in 0..<count {
            let response = try connection.readResponse()
            #expect(response["ok"] == true)
            let id = response["id"]!
            #expect(seen.insert(id).inserted, "duplicate response for \(id)")
            if case .int(let i) = id, i % 3 == 0 { #expect(response["result"]?["i"] == id) }
        }
        let expected = Set((0..<count).map { $0 % 2 == 0 ? JSONValue.int(Int64($0)) : .string("s\($0)") })
        #expect(seen == expected)
        #expect(writerError.value == nil)
        #expect(try daemon.terminate() == 0)
    }

    @Test("a slow request does not hold back a fast one sent after it")
    func outOfOrder() throws {
        let daemon = try DaemonProcess.start()
        let connection = try RawConnection(path: daemon.socketPath)
        try connection.sendFrame(#"{"op":"debug.sleep","id":"slow","args":{"ms":1500}}"#)
        try connection.sendFrame(#"{"op":"ping","id":"fast"}"#)
        #expect(try connection.readResponse()["id"] == "fast")
        #expect(try connection.readResponse()["id"] == "slow")
        #expect(try daemon.terminate() == 0)
    }

    @Test("max_in_flight = 1 serves one request at a time on a connection, dropping nothing")
    func maxInFlight() throws {
        let daemon = try DaemonProcess.start(config: "[server]\nmax_in_flight = 1\n")
        let connection = try RawConnection(path: daemon.socketPath)
        try connection.sendFrame(#"{"op":"debug.sleep","id":"slow","args":{"ms":200}}"#)
        for i in 0..<50 { try connection.sendFrame(#"{"op":"ping","id":\#(i)}"#) }
        #expect(try connection.readResponse()["id"] == "slow")
        for i in 0..<50 { #expect(try connection.readResponse()["id"] == .int(Int64(i))) }
        #expect(try daemon.terminate() == 0)
    }

    @Test("a client that stops sending (half-close) still gets its answers, then the close")
    func halfClose() throws {
        let daemon = try DaemonProcess.start()
        let connection = try RawConnection(path: daemon.socketPath)
        try connection.sendFrame(#"{"op":"debug.sleep","id":1,"args":{"ms":100}}"#)
        try connection.sendFrame(#"{"op":"ping","id":2}"#)
        connection.shutdownWrite()
        let ids = Set([try connection.readResponse()["id"]!, try connection.readResponse()["id"]!])
        #expect(ids == [1, 2])
        #expect(try connection.readsEndOfStream())
        #expect(try daemon.terminate() == 0)
    }

    /// The names of the threads of process `pid` that serve its socket: SwiftNIO's (NIO-SGLTN-...)
    /// with `--loop nio`, else keyholed's own loops (keyhole-loop-N).
    static func eventLoopThreads(_ pid: pid_t) throws -> [String] {
        let prefix = DaemonProcess.loopArguments == ["--loop", "nio"] ? "NIO-SGLTN" : "keyhole-loop-"
        return try FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task").compactMap { task in
            let name = try String(contentsOfFile: "/proc/\(pid)/task/\(task)/comm", encoding: .utf8)
            return name.hasPrefix(prefix) ? name : nil
        }
    }

    @Test("200 concurrent connections are all served, over the [server] threads event loops")
    func concurrentConnections() async throws {
        let daemon = try DaemonProcess.start(config: "[server]\nthreads = 3\n")
        #expect(try Self.eventLoopThreads(daemon.pid).count == 3)
        let clients = try await withThrowingTaskGroup(of: KeyholeClient.self) { group in
            for _ in 0..<200 { group.addTask { try await KeyholeClient.connect(socketPath: daemon.socketPath) } }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for (index, client) in clients.enumerated() {
                group.addTask {
                    for round in 0..<5 {
                        let result = try await client.call("debug.echo", args: ["c": .int(Int64(index)), "r": .int(Int64(round))])
                        #expect(result["c"] == .int(Int64(index)))
                    }
                }
            }
            try await group.waitForAll()
        }
        let stats = try await clients[0].stats()
        #expect(stats["connections"]?["open"] == 200)
        #expect(stats["connections"]?["total"] == 200)
        #expect(stats["requests"]?["debug.echo"] == 1000)
        for client in clients { try await client.close() }
        #expect(try daemon.terminate() == 0)
    }

    @Test("beyond max_connections a connection gets overloaded and is closed; the others keep working")
    func maxConnections() throws {
        let daemon = try DaemonProcess.start(config: "[server]\nmax_connections = 3\n")
        let open = try (0..<3).map { _ in try RawConnection(path: daemon.socketPath) }
        for connection in open {
            try connection.sendFrame(#"{"op":"ping","id":1}"#)
            #expect(try connection.readResponse()["ok"] == true)
        }
        let extra = try RawConnection(path: daemon.socketPath)
        let refusal = try extra.readResponse()
        #expect(refusal["error"]?["code"] == "overloaded")
        #expect(refusal["error"]?["message"] == "too many connections")
        #expect(refusal["error"]?["retry_after_ms"] == 100)
        #expect(try extra.readsEndOfStream())
        try open[0].sendFrame(#"{"op":"stats","id":2}"#)
        let stats = try open[0].readResponse()["result"]!
        #expect(stats["connections"]?["rejected"] == 1)
        #expect(stats["errors"]?["overloaded"] == 1)
        // A closed connection gives its slot back: close one, and a new connection is served.
        let leaving = open[2]
        try leaving.sendFrame(#"{"op":"ping","id":3}"#)
        _ = try leaving.readResponse()
        leaving.shutdownWrite()
        #expect(try leaving.readsEndOfStream())
        var served = false
        // The server notices the close on its own event loop; retry until the slot is free (for up to
        // a minute: a count of attempts would run out sooner on a fast machine than a slow one needs).
        let deadline = ContinuousClock.now + .seconds(60)
        while !served && ContinuousClock.now < deadline {
            // A refused attempt is answered overloaded and closed, which may also fail our send.
            let replacement = try RawConnection(path: daemon.socketPath)
            guard (try? replacement.sendFrame(#"{"op":"ping","id":4}"#)) != nil else { continue }
            served = (try? replacement.readResponse())?["ok"] == true
        }
        #expect(served)
        #expect(try daemon.terminate() == 0)
    }

    @Test(
        "at max_connections_per_uid, a client refused a second connection that closes its first and at once opens another is served, every time",
        // SwiftNIO's loop, kept for one release, refuses at once (PROTOCOL.md): the wait is the epoll loop's.
        .enabled(if: ProcessInfo.processInfo.environment["KEYHOLE_TEST_LOOP"] != "nio"),
        arguments: [1, 3])
    func reconnectAtPerUIDLimit(threads: Int) throws {
        // The new connection may be accepted before any loop has read the first one's hang-up (the
        // loop accepts until the backlog is empty; another loop may hold the first): at the limit, a
        // connection waits for every loop to read what was signalled before it is refused.
        let daemon = try DaemonProcess.start(config: "[server]\nmax_connections_per_uid = 1\nthreads = \(threads)\n")
        var holder: RawConnection? = try RawConnection(path: daemon.socketPath)
        try holder!.sendFrame(#"{"op":"ping","id":0}"#)
        #expect(try holder!.readResponse()["ok"] == true)
        var served = 0
        for round in 1...200 {
            let extra = try RawConnection(path: daemon.socketPath)
            #expect(try extra.readResponse()["error"]?["code"] == "overloaded")
            // Hung up, then closed, before the next connects. A close alone ends nothing while a child
            // another test is spawning holds a copy of the descriptor: the server then rightly still
            // counts it (this failed so, 1 full make test in 3, at 3 threads).
            holder!.hangUp()
            holder = nil
            holder = try RawConnection(path: daemon.socketPath)
            try holder!.sendFrame(#"{"op":"ping","id":\#(round)}"#)
            if try holder!.readResponse()["ok"] == true { served += 1 }
        }
        #expect(served == 200)
        #expect(try daemon.terminate() == 0)
    }
}

/// A value written by the writer thread and read after it is done.
final class WriterResult: @unchecked Sendable {
    private let lock = NSLock()
    private var error: String?
    func set(_ value: String) { lock.withLock { error = value } }
    var value: String? { lock.withLock { error } }
}
