import Foundation
import KeyholeServer
import KeyholeStore
import KeyholeTestSupport
import Logging
import NIOPosix
import ServiceLifecycle
import Testing

@testable import KeyholeHTTP

/// /authz's answer when the store has a change on its way to the disk: it waits for the sync, and
/// the requests pipelined after it wait their turn. In process, with the store's sync held.
@Suite("HTTP listener: answers that wait for the disk", .serialized)
struct HTTPListenerWaitTests {
    /// A store with `held` as its sync and a listener on it, served while `body` runs on a thread.
    static func serve(_ body: @escaping @Sendable (Store, String, HeldSync) throws -> Void) async throws {
        try await serve { store, socket, held, _ in try body(store, socket, held) }
    }

    /// As `serve(_:)`, `body` also given a way to begin the graceful shutdown (it returns at once).
    static func serve(_ body: @escaping @Sendable (Store, String, HeldSync, @escaping @Sendable () -> Void) throws -> Void) async throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let held = HeldSync()
        var storeConfiguration = Store.Configuration()
        storeConfiguration.syncData = held.syncData
        let (store, _) = try ChildProcess.withoutSpawning { () throws(StoreError) in
            try Store.open(stateDirectory: directory.path, configuration: storeConfiguration, now: 1_700_000_000)
        }
        var configuration = HTTPListener.Configuration()
        let socket = directory.appendingPathComponent("h.sock").path
        configuration.socket = .path(socket, mode: 0o600, group: nil)
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let (ready, readyContinuation) = AsyncStream.makeStream(of: Void.self)
        let listener = HTTPListener(
            configuration: configuration, store: .local(store), access: AccessPolicy(serverUser: UInt32(geteuid())),
            now: { 1_700_000_000 }, health: { store.statistics.failure == nil ? .ok : .storageFailed }, logger: logger
        ) { readyContinuation.yield() }
        let group = ServiceGroup(services: [StoreCommitter(store: store, logger: logger), listener], logger: logger)
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask {
                defer { readyContinuation.finish() }
                try await group.run()
            }
            for await _ in ready { break }
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let shutdown: @Sendable () -> Void = { Task { await group.triggerGracefulShutdown() } }
                Thread.detachNewThread {
                    let result = Result { try body(store, socket, held, shutdown) }
                    // A body that failed may have left a sync held: let it go (failing), or the
                    // shutdown below would wait for it for ever and the failure never be reported.
                    if case .failure = result { held.release(succeeding: false) }
                    continuation.resume(with: result)
                }
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }

    /// Returns once the listener's lookup is waiting for the disk (the request was read and looked up).
    static func waitUntilALookupWaits(_ store: Store) throws {
        for _ in 0..<10_000 where store.waitingReads == 0 { usleep(1000) }
        guard store.waitingReads == 1 else { throw RawConnection.Failure(description: "no lookup waits for the disk") }
    }

    /// A session of alice's, durable; then a change of bob's on its way to the disk, its sync held.
    static func aliceWithAChangeHeld(_ store: Store, _ held: HeldSync) throws -> String {
        let (token, done) = try create("alice", in: store)
        done.wait()
        held.arm()
        _ = try create("bob", in: store)
        held.waitUntilEntered()
        return token
    }

    /// Creates a session for `sub`; returns its token once the store says it is durable.
    static func create(_ sub: String, in store: Store) throws -> (token: String, done: DispatchSemaphore) {
        let done = DispatchSemaphore(value: 0)
        let created = try store.createSession(
            for: Principal(issuer: "local", sub: sub), now: 1_700_000_000, ttl: 3600, idle: 3600, data: nil) { _ in done.signal() }
        return (created.token, done)
    }

    @Test("a lookup waiting for a sync that fails is answered 503, and the request pipelined after it waits its turn")
    func waitsForTheSync() async throws {
        try await Self.serve { store, socket, held in
            let token = try Self.aliceWithAChangeHeld(store, held)
            let http = HTTPExchange(try RawConnection(path: socket))
            try http.connection.send(Array((
                "GET /authz HTTP/1.1\r\nHost: k\r\nCookie: kh_session=\(token)\r\n\r\n" + "GET /healthz HTTP/1.1\r\nHost: k\r\n\r\n").utf8))
            try Self.waitUntilALookupWaits(store)
            // The sync fails: what the lookup read may be taken back, so it is not vouched for.
            held.release(succeeding: false)
            let authz = try http.readAnswer()
            #expect(authz.status == 503)
            #expect(authz.header("X-Auth-Request-User") == "")
            let health = try http.readAnswer()
            #expect(health.status == 503 && health.body.contains("storage"))
        }
    }

    @Test("at shutdown a lookup waiting for the disk is still answered, and the requests held behind it, the last with Connection: close; then the connection closes")
    func drainsAWaitingAnswer() async throws {
        try await Self.serve { store, socket, held, shutdown in
            let (token, done) = try Self.create("alice", in: store)
            done.wait()
            let idle = HTTPExchange(try RawConnection(path: socket))
            #expect(try idle.request("GET", "/healthz").status == 200)
            held.arm()
            _ = try Self.create("bob", in: store)
            held.waitUntilEntered()
            let http = HTTPExchange(try RawConnection(path: socket))
            try http.send("GET", "/authz", headers: ["Cookie": "kh_session=\(token)"])
            try http.send("GET", "/healthz")
            try http.send("GET", "/healthz")
            try Self.waitUntilALookupWaits(store)
            shutdown()
            // The idle keep-alive connection is closed at once; the one waiting answers what it had
            // read (the two held back behind the lookup too), the last with Connection: close.
            #expect(try idle.readsEndOfStream())
            held.release(succeeding: true)
            let authz = try http.readAnswer()
            #expect(authz.status == 200 && authz.header("Connection") == nil)
            let first = try http.readAnswer()
            #expect(first.status == 503 && first.body.contains("shutting_down") && first.header("Connection") == nil)
            let last = try http.readAnswer()
            #expect(last.status == 503 && last.header("Connection") == "close")
            #expect(try http.readsEndOfStream())
        }
    }

    @Test("a lookup waiting for a sync that succeeds is answered 200 once it is done")
    func answersAfterTheSync() async throws {
        try await Self.serve { store, socket, held in
            let token = try Self.aliceWithAChangeHeld(store, held)
            let http = HTTPExchange(try RawConnection(path: socket))
            try http.send("GET", "/authz", headers: ["Cookie": "kh_session=\(token)"])
            try http.send("GET", "/healthz")
            try Self.waitUntilALookupWaits(store)
            held.release(succeeding: true)
            let authz = try http.readAnswer()
            #expect(authz.status == 200 && authz.header("X-Auth-Request-User") == "alice")
            #expect(try http.readAnswer().status == 200)
        }
    }
}
