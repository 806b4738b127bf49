import Foundation
import KeyholeProtocol
import KeyholeServer
import KeyholeStore
import KeyholeTestSupport
import Logging
import NIOCore
import NIOPosix
import ServiceLifecycle
import Synchronization
import Testing

/// With `fsync = "always"`, keyholed answers a change only once fdatasync returned: a session.create
/// whose sync is held has no answer on the socket, and one whose sync fails is answered
/// storage_unavailable and is not there after a restart. The server and store run in this process, wired
/// as keyholed wires them, so that the sync can be held (a failpoint a child process would not have).
@Suite("A change's answer waits for its fdatasync, end to end", .ownThreads)
struct CommitSyncEndToEndTests {
    @Test("held: no answer; released: answered; failed: storage_unavailable, and gone after a restart",
        .timeLimit(.minutes(1)), arguments: ["committer thread", "event loop"])
    func heldSync(committedBy: String) async throws {
        // Short enough for the socket's path (DaemonProcess.makeDirectory).
        let directory = try DaemonProcess.makeDirectory().path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let now: Int64 = 1_780_000_000
        try await Self.serve(directory, committedBy: committedBy, now: now) { socket, held in
            let seen = try Self.client(socket, held)
            // Written, their syncs under way: nothing had been answered.
            #expect(!seen.answeredWhileHeld.contains(true))
            #expect(seen.kept["ok"] == true, "\(seen.kept.jsonText)")
            #expect(seen.lost["ok"] == false && seen.lost["error"]?["code"] == "storage_unavailable", "\(seen.lost.jsonText)")
            // The session.get that waited is the one answered at once later, byte for byte.
            #expect(seen.readWhileHeld["ok"] == true && seen.readWhileHeld["result"]?["sub"] == "kept", "\(seen.readWhileHeld.jsonText)")
            #expect(seen.readWhileHeldBytes == seen.readAfterBytes)
        }

        // A restart has the first change and not the second. (The store above is gone, and its lock
        // with it, once its last reference is: a moment after the server's threads let go.)
        let deadline = ContinuousClock.now + .seconds(10)
        var reopened = try Self.open(directory, now: now)
        while reopened == nil && ContinuousClock.now < deadline {
            try await Task.sleep(for: .milliseconds(5))
            reopened = try Self.open(directory, now: now)
        }
        let store = try #require(reopened)
        #expect(store.statistics.sessions == 2)
        #expect(!store.sessions(of: Principal(issuer: "local", sub: "kept"), now: now).isEmpty)
        #expect(!store.sessions(of: Principal(issuer: "local", sub: "also kept"), now: now).isEmpty)
        #expect(store.sessions(of: Principal(issuer: "local", sub: "lost"), now: now).isEmpty)
    }

    @Test("stats' in_flight counts a change waiting for its sync until it is answered, and never a request answered as it is read (stats itself)",
        .timeLimit(.minutes(1)))
    func inFlightCountsWaitingChanges() async throws {
        let directory = try DaemonProcess.makeDirectory().path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await Self.serve(directory, committedBy: "committer thread", now: 1_780_000_000) { socket, held in
            let changer = try RawConnection(path: socket)
            let observer = try RawConnection(path: socket)
            #expect(try observer.result("stats")["in_flight"] == 0)
            held.arm()
            try changer.sendFrame(#"{"op":"session.create","id":1,"args":{"sub":"waiting"}}"#)
            held.waitUntilEntered()
            // The sync can start before the change's loop has counted it (the committer thread runs it):
            // asked again until counted. It stays counted while the sync is held, so it must come.
            var seen: JSONValue? = nil
            for _ in 0..<10_000 {
                seen = try observer.result("stats")["in_flight"]
                if seen != 0 { break }
            }
            #expect(seen == 1)
            #expect(!changer.hasUnreadBytes)
            held.release(succeeding: true)
            #expect(try changer.readResponse()["ok"] == true)
            // Counted off before its answer was written.
            #expect(try observer.result("stats")["in_flight"] == 0)

            // A change whose client left while it waited is counted off all the same, once done.
            let leaver = try RawConnection(path: socket)
            held.arm()
            try leaver.sendFrame(#"{"op":"session.create","id":2,"args":{"sub":"left"}}"#)
            held.waitUntilEntered()
            leaver.hangUp()
            held.release(succeeding: true)
            // Answered on its loop after the release: asked again until then (bounded).
            seen = nil
            for _ in 0..<10_000 {
                seen = try observer.result("stats")["in_flight"]
                if seen == 0 { break }
            }
            #expect(seen == 0)
        }
    }

    /// What the client saw.
    struct Seen {
        var answeredWhileHeld: [Bool] = []
        var kept: JSONValue = nil
        var lost: JSONValue = nil
        /// A session.get sent while a create's sync was held: its answer, and that answer's bytes
        /// beside those of the same session.get sent once nothing was held.
        var readWhileHeld: JSONValue = nil
        var readWhileHeldBytes: [UInt8] = []
        var readAfterBytes: [UInt8] = []
    }

    /// Creates a session whose sync is held then succeeds, and one whose sync is held then fails.
    static func client(_ socket: String, _ held: HeldSync) throws -> Seen {
        let connection = try RawConnection(path: socket)
        var seen = Seen()
        held.arm()
        try connection.sendFrame(#"{"op":"session.create","id":1,"args":{"sub":"kept"}}"#)
        held.waitUntilEntered()
        seen.answeredWhileHeld.append(connection.hasUnreadBytes)
        held.release(succeeding: true)
        seen.kept = try connection.readResponse()

        // A read that could see a change on its way to the disk waits for it: session.get's answer,
        // written as it was read, is kept until then.
        let token = try #require(seen.kept["result"]?["session"]?.stringValue)
        let reader = try RawConnection(path: socket)
        held.arm()
        try connection.sendFrame(#"{"op":"session.create","id":3,"args":{"sub":"also kept"}}"#)
        held.waitUntilEntered()
        // Answers may come in any order: the ping's, read first, shows the session.get before it read
        // and held back, not merely not read yet.
        try reader.sendFrame(#"{"op":"session.get","id":4,"args":{"session":"\#(token)"}}"#)
        try reader.sendFrame(#"{"op":"ping","id":5}"#)
        let first = try reader.readResponse()
        seen.answeredWhileHeld.append(first["id"] != 5)
        seen.answeredWhileHeld.append(reader.hasUnreadBytes)
        held.release(succeeding: true)
        _ = try connection.readResponse()
        seen.readWhileHeldBytes = try #require(try reader.readFrame())
        seen.readWhileHeld = try JSONValue.parse(ByteBuffer(bytes: seen.readWhileHeldBytes))
        try reader.sendFrame(#"{"op":"session.get","id":4,"args":{"session":"\#(token)"}}"#)
        seen.readAfterBytes = try #require(try reader.readFrame())

        held.arm()
        try connection.sendFrame(#"{"op":"session.create","id":2,"args":{"sub":"lost"}}"#)
        held.waitUntilEntered()
        seen.answeredWhileHeld.append(connection.hasUnreadBytes)
        held.release(succeeding: false)
        seen.lost = try connection.readResponse()

        return seen
    }

    /// The store in `directory`, or nil while another store still holds it.
    static func open(_ directory: String, now: Int64) throws -> Store? {
        let opened = ChildProcess.withoutSpawning { () -> Result<Store, StoreError> in
            Result { () throws(StoreError) in try Store.open(stateDirectory: directory, now: now).0 }
        }
        switch opened {
        case .success(let store): return store
        case .failure(let error) where error.isLocked: return nil
        case .failure(let error): throw error
        }
    }

    /// Runs a store and a server on it with a held sync, and `client` (on a thread of its own, as it
    /// blocks) with the socket's path and the sync.
    static func serve(
        _ directory: String, committedBy: String, now: Int64, client: @escaping @Sendable (String, HeldSync) throws -> Void
    ) async throws {
        let held = HeldSync()
        var storeConfiguration = Store.Configuration()
        storeConfiguration.syncData = held.syncData
        let (store, _) = try ChildProcess.withoutSpawning { () throws(StoreError) in
            try Store.open(stateDirectory: directory, configuration: storeConfiguration, now: now)
        }
        if committedBy == "event loop" {
            // As keyholed does (`[storage] commit_on_event_loop`).
            store.commitInline { commit in
                guard let loop = MultiThreadedEventLoopGroup.currentEventLoop else { return false }
                loop.execute(commit)
                return true
            }
        }
        var configuration = KeyholeServer.Configuration()
        let socket = directory + "/s.sock"
        configuration.listener = .path(socket, mode: 0o600)
        var logger = Logger(label: "test")
        logger.logLevel = .critical
        let (ready, readyContinuation) = AsyncStream.makeStream(of: Void.self)
        let server = KeyholeServer(
            configuration: configuration, operations: StoreOperations.make(store: store, configuration: .init(), now: { now }),
            logger: logger
        ) { readyContinuation.yield() }
        // The committer before the server, as in keyholed: stopped after it, it flushes what is queued.
        let group = ServiceGroup(services: [StoreCommitter(store: store, logger: logger), server], logger: logger)

        try await withThrowingTaskGroup(of: Void.self) { tasks in
            tasks.addTask {
                defer { readyContinuation.finish() }
                try await group.run()
            }
            for await _ in ready { break }
            // The client blocks (on the socket, on the held sync): on a thread of its own, not the
            // cooperative pool's.
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                Thread.detachNewThread {
                    continuation.resume(with: Result { try client(socket, held) })
                }
            }
            await group.triggerGracefulShutdown()
            try await tasks.waitForAll()
        }
    }
}
