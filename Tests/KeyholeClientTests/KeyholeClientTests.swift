import Foundation
@testable import KeyholeClient
import KeyholeProtocol
import KeyholeServer
import KeyholeTestSupport
import Logging
import ServiceLifecycle
import Testing

/// Runs a real KeyholeServer in this process on a temporary socket for the duration of `body`.
func withServer(
    configure: (inout KeyholeServer.Configuration) -> Void = { _ in },
    _ body: (String) async throws -> Void
) async throws {
    try await withServer(configure: configure) { path, _ in try await body(path) }
}

/// As `withServer`, with the server itself (to apply a reload's settings, say).
func withServer(
    configure: (inout KeyholeServer.Configuration) -> Void = { _ in },
    _ body: (String, KeyholeServer) async throws -> Void
) async throws {
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent("khc-\(UInt32.random(in: 0...UInt32.max))")
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(at: directory) }
    let path = directory.appendingPathComponent("s.sock").path
    var configuration = KeyholeServer.Configuration()
    configuration.listener = .path(path, mode: 0o600)
    configuration.enableDebugOperations = true
    // `make test` runs these suites once on each of the server's event loops.
    if let loop = ProcessInfo.processInfo.environment["KEYHOLE_TEST_LOOP"].flatMap(KeyholeServer.Loop.init(rawValue:)) {
        configuration.loop = loop
    }
    configure(&configuration)
    var logger = Logger(label: "test")
    logger.logLevel = .warning
    let (ready, readyContinuation) = AsyncStream.makeStream(of: Void.self)
    let server = KeyholeServer(configuration: configuration, logger: logger) {
        readyContinuation.yield()
    }
    let group = ServiceGroup(services: [server], logger: logger)
    try await withThrowingTaskGroup(of: Void.self) { tasks in
        tasks.addTask {
            // If the server fails to start, end the readiness wait instead of hanging.
            defer { readyContinuation.finish() }
            try await group.run()
        }
        var started = false
        for await _ in ready {
            started = true
            break
        }
        guard started else {
            try await tasks.waitForAll()
            throw CancellationError()
        }
        do {
            try await body(path, server)
        } catch {
            await group.triggerGracefulShutdown()
            throw error
        }
        await group.triggerGracefulShutdown()
        try await tasks.waitForAll()
    }
}

@Suite("KeyholeClient", .ownThreads)
struct KeyholeClientTests {
    @Test("ping returns the protocol and server version")
    func ping() async throws {
        try await withServer { path in
            let client = try await KeyholeClient.connect(socketPath: path)
            let pong = try await client.ping()
            #expect(pong.protocolVersion == 1)
            #expect(pong.version == KeyholeVersion.current)
            try await client.close()
        }
    }

    @Test("1000 concurrent calls pipelined on one connection each get their own answer")
    func pipelining() async throws {
        try await withServer { path in
            let client = try await KeyholeClient.connect(socketPath: path)
            try await withThrowingTaskGroup(of: Void.self) { group in
                for i in 0..<1000 {
                    group.addTask {
                        let result = try await client.call("debug.echo", args: ["i": .int(Int64(i))])
                        #expect(result == ["i": .int(Int64(i))])
                    }
                }
                try await group.waitForAll()
            }
            let stats = try await client.stats()
            #expect(stats["connections"]?["total"] == 1)
            #expect(stats["requests"]?["debug.echo"] == 1000)
            try await client.close()
        }
    }

    @Test("an error response is thrown as ProtocolError with its code")
    func errorResponse() async throws {
        try await withServer { path in
            let client = try await KeyholeClient.connect(socketPath: path)
            await #expect(throws: ProtocolError.unknownOp("x")) { try await client.call("no.such.op") }
            await #expect(throws: ProtocolError.badRequest("")) { try await client.call("debug.sleep", args: ["ms": "soon"]) }
            // The connection is still usable.
            #expect(try await client.ping().protocolVersion == 1)
            try await client.close()
        }
    }

    @Test("a request with no answer in time fails with timeout; the connection stays usable")
    func timeout() async throws {
        try await withServer { path in
            // 2 s: far below the sleep, and ample for the ping after it even on a loaded CI machine.
            let client = try await KeyholeClient.connect(socketPath: path, requestTimeout: .seconds(2))
            await #expect(throws: KeyholeClientError.timeout) { try await client.call("debug.sleep", args: ["ms": 60_000]) }
            #expect(try await client.ping().protocolVersion == 1)
            try await client.close()
        }
    }

    @Test("a missing socket: connect is unavailable at once; a call tries until its deadline, then is unavailable")
    func cannotConnect() async throws {
        let path = "/tmp/keyhole-test-no-such-\(UInt32.random(in: 0...UInt32.max)).sock"
        do {
            _ = try await KeyholeClient.connect(socketPath: path)
            Issue.record("connected to a socket that does not exist")
        } catch {
            #expect(error.code == "unavailable")
            #expect(error.message.contains("cannot connect to \(path)"), "\(error.message)")
        }
        let started = ContinuousClock.now
        let lazy = KeyholeClient(socketPath: path, configuration: .init(deadline: .milliseconds(300)))
        await #expect(throws: KeyholeClientError.unavailable("")) { try await lazy.call("session.create", args: ["sub": "a"]) }
        #expect(ContinuousClock.now - started >= .milliseconds(300), "it tried until the deadline")
    }

    @Test("a call without a deadline, waiting for a socket that is not there, ends when its task is cancelled", .timeLimit(.minutes(1)))
    func cancelledWhileReconnecting() async throws {
        let path = "/tmp/keyhole-test-no-such-\(UInt32.random(in: 0...UInt32.max)).sock"
        let client = KeyholeClient(socketPath: path, configuration: .init(deadline: nil))
        let call = Task { try await client.call("session.create", args: ["sub": "a"]) }
        // Whether the cancellation finds it connecting or waiting, it must end (a call that spun on
        // would never end: the time limit fails the test).
        call.cancel()
        await #expect(throws: KeyholeClientError.unavailable("")) { try await call.value }
    }

    @Test("after the server has gone (socket removed), a call tries to reconnect until its deadline, then is unavailable")
    func serverShutdown() async throws {
        var client: KeyholeClient?
        try await withServer { path in
            let connected = try await KeyholeClient.connect(socketPath: path, requestTimeout: .seconds(2))
            client = connected
            #expect(try await connected.ping().protocolVersion == 1)
        }
        await #expect(throws: KeyholeClientError.unavailable("")) { try await client!.call("ping") }
    }

    @Test("the socket: the one given, else $KEYHOLE_SOCKET (when not empty), else /run/keyhole/keyhole.sock")
    func socketPath() {
        typealias Configuration = KeyholeClient.Configuration
        #expect(Configuration.socketPath(given: "/a.sock", environment: "/b.sock") == "/a.sock")
        #expect(Configuration.socketPath(given: nil, environment: "/b.sock") == "/b.sock")
        #expect(Configuration.socketPath(given: nil, environment: "") == "/run/keyhole/keyhole.sock")
        #expect(Configuration.socketPath(given: nil, environment: nil) == "/run/keyhole/keyhole.sock")
        #expect(KeyholeClient(socketPath: "/c.sock").socketPath == "/c.sock")
        #expect(KeyholeClient.Configuration().deadline == .seconds(5))
    }

    @Test("a connection beyond max_connections fails with overloaded and its retry hint")
    func overloaded() async throws {
        try await withServer(configure: { $0.maxConnections = 1 }) { path in
            let first = try await KeyholeClient.connect(socketPath: path)
            #expect(try await first.ping().protocolVersion == 1)
            let second = try await KeyholeClient.connect(socketPath: path)
            do {
                _ = try await second.call("ping")
                Issue.record("expected overloaded")
            } catch let error as ProtocolError {
                #expect(error.code == .overloaded)
                #expect(error.retryAfterMs != nil)
            }
            try await first.close()
        }
    }
}

@Suite("KeyholeServer listeners", .ownThreads)
struct ListenerTests {
    @Test("an already-listening socket handed over as a file descriptor is served (as systemd will hand one)")
    func inheritedDescriptor() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("khfd-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let path = directory.appendingPathComponent("s.sock").path
        let fd = try UnixSocket.bound(to: path, listening: 16)

        try await withServer(configure: { $0.listener = .descriptor(fd) }) { _ in
            let client = try await KeyholeClient.connect(socketPath: path)
            #expect(try await client.ping().protocolVersion == 1)
            try await client.close()
        }
        // The server does not remove a socket file it did not create.
        #expect(FileManager.default.fileExists(atPath: path))
    }
}
