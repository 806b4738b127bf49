import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Synchronization
import Testing

/// kill -9 while many connections create and revoke sessions, twenty times over one state directory:
/// after every restart each acknowledged change is there, and nothing unacknowledged is half there.
@Suite("crash safety, end to end", .serialized, .ownThreads)
struct SessionCrashEndToEndTests {
    /// What the clients were told, across all rounds.
    final class Ledger: Sendable {
        struct Books {
            /// Created and acknowledged, with whether a revoke of it was acknowledged.
            var created: [String: Bool] = [:]
            /// Tokens whose revoke was sent but never answered: either state is right.
            var revokeInDoubt: Set<String> = []
            /// Creates sent but never answered (their tokens are unknown).
            var createsInDoubt = 0
            var acknowledged = 0
        }
        let books = Mutex(Books())
    }

    static let workers = 12
    /// Small, so that snapshots are taken (and cut short by kill -9) in most rounds.
    static let config = "[storage]\nsnapshot_wal_bytes = \"64KiB\"\n"

    /// Two to three minutes of waiting: on a thread of its own (`onOwnThread`).
    @Test("20 rounds of kill -9 under concurrent session.create and session.revoke")
    func killNine() async throws {
        try await onOwnThread { try killNineRounds() }
    }

    private func killNineRounds() throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let ledger = Ledger()
        var generator = SystemRandomNumberGenerator()
        for round in 1...20 {
            let daemon = try DaemonProcess(config: Self.config, directory: directory)
            try daemon.waitUntilReady()
            try verify(ledger, daemon: daemon, round: round)

            // Kill after a random number of acknowledgements in this round: a random moment, reached
            // by counting answers rather than by sleeping.
            let killAfter = Int.random(in: 20...400, using: &generator)
            let answered = Atomic<Int>(0)
            let done = (0..<Self.workers).map { _ in DispatchSemaphore(value: 0) }
            let socket = daemon.socketPath
            for (worker, semaphore) in done.enumerated() {
                Thread { [ledger] in
                    Self.work(worker: worker, round: round, socket: socket, ledger: ledger) {
                        if answered.wrappingAdd(1, ordering: .relaxed).newValue == killAfter { daemon.signal(SIGKILL) }
                    }
                    semaphore.signal()
                }.start()
            }
            for semaphore in done { #expect(semaphore.wait(timeout: .now() + 120) == .success) }
            #expect(try daemon.waitForExit() == 128 + SIGKILL)
        }
        let daemon = try DaemonProcess(config: Self.config, directory: directory)
        try daemon.waitUntilReady()
        try verify(ledger, daemon: daemon, round: 21)
        #expect(try daemon.terminate() == 0)

        // Only hashes are stored: no token the clients received is anywhere in the state directory.
        let tokens = ledger.books.withLock { Array($0.created.keys) }
        #expect(tokens.count > 100)
        var stateBytes: [UInt8] = []
        let state = directory.appendingPathComponent("state")
        for case let file as String in FileManager.default.enumerator(atPath: state.path)! {
            let url = state.appendingPathComponent(file)
            if (try? url.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true { stateBytes += try Data(contentsOf: url) }
        }
        #expect(stateBytes.count > 1000)
        let snapshots = try FileManager.default.contentsOfDirectory(atPath: state.appendingPathComponent("snapshots").path)
        #expect(snapshots.count == 1 && snapshots[0].hasSuffix(".snap"))
        let text = String(decoding: stateBytes, as: UTF8.self)
        for token in tokens { #expect(!text.contains(String(token.dropFirst(3)))) }
    }

    /// One client: creates sessions and revokes every third one it made, until the connection dies.
    static func work(worker: Int, round: Int, socket: String, ledger: Ledger, answered: @escaping () -> Void) {
        guard let connection = try? RawConnection(path: socket) else { return }
        var mine: [String] = []
        var n = 0
        while true {
            n += 1
            if worker == 0 && n % 50 == 0 {
                // A snapshot on demand, on top of those the log's growth triggers.
                guard let response = try? connection.call("admin.snapshot") else { return }
                #expect(response["ok"] == true, "admin.snapshot answered \(response.jsonText)")
                continue
            }
            if n % 3 == 0, let victim = mine.popLast() {
                ledger.books.withLock { _ = $0.revokeInDoubt.insert(victim) }
                guard let response = try? connection.call("session.revoke", ["session": .string(victim)]) else { return }
                guard response["result"]?["revoked"] == true else {
                    Issue.record("revoke of a live session answered \(response.jsonText)")
                    return
                }
                ledger.books.withLock { books in
                    books.revokeInDoubt.remove(victim)
                    books.created[victim] = true
                    books.acknowledged += 1
                }
            } else {
                ledger.books.withLock { $0.createsInDoubt += 1 }
                let sub = JSONValue.string("r\(round)w\(worker)")
                guard let response = try? connection.call("session.create", ["sub": sub, "data": ["n": .int(Int64(n))]]),
                    let token = response["result"]?["session"]?.stringValue
                else { return }
                ledger.books.withLock { books in
                    books.createsInDoubt -= 1
                    books.created[token] = false
                    books.acknowledged += 1
                }
                mine.append(token)
            }
            answered()
        }
    }

    /// Every acknowledged create is there unless its revoke was acknowledged (or is in doubt); every
    /// acknowledged revoke is gone; the session count is within what the doubtful requests allow.
    func verify(_ ledger: Ledger, daemon: DaemonProcess, round: Int) throws {
        let books = ledger.books.withLock { $0 }
        let connection = try RawConnection(path: daemon.socketPath)
        var live = 0
        for (token, revoked) in books.created {
            let response = try connection.call("session.get", ["session": .string(token)])
            let found = response["ok"] == true
            // Not found means exactly that: any other error (storage, internal) is a failure of its own.
            if !found {
                #expect(response["error"]?["code"] == "session_not_found", "round \(round): \(response.jsonText)")
            }
            if books.revokeInDoubt.contains(token) {
                if found { live += 1 }
                continue
            }
            #expect(found == !revoked, "round \(round): session \(revoked ? "revoked" : "created") and acknowledged, found: \(found)")
            if found {
                live += 1
                #expect(response["result"]?["data"]?["n"]?.intValue != nil, "round \(round): a session without its data")
            }
        }
        let count = try connection.result("stats")["store"]?["sessions"]?.intValue ?? -1
        #expect(count >= live && count <= live + books.createsInDoubt, "round \(round): \(count) sessions, \(live) known live, \(books.createsInDoubt) creates in doubt")
    }
}
