import Foundation
import KeyholeProtocol
import Synchronization
import Testing
@testable import KeyholeStore

/// The store on real files: changes durable before their completion, restarts, tokens never stored,
/// the lock, corruption at start-up and --repair.
/// Set by a completion, read by its test.
private let marker = Mutex(false)

@Suite("Store", .serialized)
struct StoreTests {
    static let alice = Principal(issuer: "apple", sub: "alice")
    static let bob = Principal(issuer: "google", sub: "bob")
    let now: Int64 = 1_800_000_000

    @Test("sessions, revocations and users survive a restart; tokens never reach the disk")
    func restart() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var tokens: [String] = []
        var running = try RunningStore(directory, now: now)
        for n in 0..<6 {
            let principal = n % 2 == 0 ? Self.alice : Self.bob
            let data: [UInt8]? = n == 0 ? Array(#"{"theme":"dark"}"#.utf8) : nil
            let (token, session) = try await durably { [running] done throws(StoreError) in
                try running.store.createSession(for: principal, now: now + Int64(n), ttl: 86_400, idle: 3600, data: data, completion: done)
            }
            #expect(token.hasPrefix("kh_") && token.utf8.count == 46)
            #expect(session.principal == principal)
            tokens.append(token)
        }
        let revoked = try await durably { [running] done throws(StoreError) in
            try running.store.revokeSession(token: tokens[1], now: now, completion: done)
        }
        #expect(revoked)
        let again = try await durably { [running] done throws(StoreError) in
            try running.store.revokeSession(token: tokens[1], now: now, completion: done)
        }
        #expect(!again)
        let (user, created) = try await durably { [running] done throws(StoreError) in
            try running.store.updateUser(Self.alice, now: now + 10, completion: done) { $0.fields["email"] = "alice@example.com" }
        }
        #expect(!created)
        #expect(user.fields["email"] == "alice@example.com")
        #expect(user.createdAt == now)
        await running.close()

        running = try RunningStore(directory, now: now + 100)
        #expect(running.report.replayed == 6 + 1 + 1)
        let store = running.store
        #expect(store.session(token: tokens[0], now: now + 100)?.session.data == Array(#"{"theme":"dark"}"#.utf8))
        #expect(store.session(token: tokens[0], now: now + 100)?.user?.fields["email"] == "alice@example.com")
        #expect(store.session(token: tokens[1], now: now + 100) == nil)
        #expect(store.sessions(of: Self.alice, now: now + 100).count == 3)
        #expect(store.sessions(of: Self.bob, now: now + 100).count == 2)
        #expect(store.statistics.users == 2)
        await running.close()

        let bytes = try directory.allBytes()
        for token in tokens {
            #expect(bytes.firstRange(of: Array(token.utf8)) == nil, "a token is in the state directory")
            #expect(bytes.firstRange(of: Array(token.dropFirst(3).utf8)) == nil)
        }
    }

    @Test("expired sessions are gone after a restart without any record of their expiry")
    func expiryAcrossRestart() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var running = try RunningStore(directory, now: now)
        let (short, _) = try await durably { [running, now] done throws(StoreError) in
            try running.store.createSession(for: Self.alice, now: now, ttl: 60, idle: 3600, data: nil, completion: done)
        }
        let (idle, _) = try await durably { [running, now] done throws(StoreError) in
            try running.store.createSession(for: Self.alice, now: now, ttl: 86_400, idle: 120, data: nil, completion: done)
        }
        // Used at now+100 (logged: a minute or more since creation), so idle until now+220.
        #expect(running.store.session(token: idle, now: now + 100) != nil)
        await running.close()

        running = try RunningStore(directory, now: now + 200)
        #expect(running.report.expired == 1)
        #expect(running.store.session(token: short, now: now + 200) == nil)
        #expect(running.store.session(token: idle, now: now + 200) != nil)
        #expect(running.store.session(token: idle, now: now + 200 + 121) == nil)
        await running.close()
    }

    @Test("a second store on the same directory is refused while the first holds it")
    func lock() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let running = try RunningStore(directory, now: now)
        // The configuration given, not left to its default argument: with the default, `open` throwing
        // crashed the test process in debug builds (a bad pointer in the caller) once Store.Configuration
        // grew a field; an incremental build, Swift 6.3.1. keyholed always passes one.
        let configuration = Store.Configuration()
        #expect(throws: StoreError.locked("")) { _ = try Store.open(stateDirectory: directory.path, configuration: configuration, now: now) }
        await running.close()
    }

    @Test("a damaged record in the middle stops start-up naming file and offset; --repair cuts and keeps a copy")
    func corruption() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var running: RunningStore? = try RunningStore(directory, now: now)
        var tokens: [String] = []
        for n in 0..<5 {
            let (token, _) = try await durably { [running, now] done throws(StoreError) in
                try running!.store.createSession(for: Self.alice, now: now + Int64(n), ttl: 3600, idle: 3600, data: nil, completion: done)
            }
            tokens.append(token)
        }
        await running!.close()
        running = nil
        let segment = WALDirectory(stateDirectory: directory.path).segmentPath(1)
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: segment)))
        let scan = WALScanner.scan(bytes, sequence: 1, isLast: true)
        bytes[scan.offsets[2] + 20] ^= 0xFF
        // Each change was a batch of its own: the damaged record's batch is where the log is cut.
        let third = scan.offsets[2] - WALBatchHeader.size
        try Data(bytes).write(to: URL(fileURLWithPath: segment))

        do {
            _ = try openStore(directory.path, now: now)
            Issue.record("a corrupt log opened")
        } catch {
            #expect(error.isCorruption)
            #expect(error.message.contains(segment))
            #expect(error.message.contains("offset \(third)"))
        }

        let repaired = try RunningStore(directory, repair: true, now: now)
        #expect(repaired.report.lostRecords == 3)
        let cut = try #require(repaired.report.cutDirectory)
        let kept = try FileManager.default.contentsOfDirectory(atPath: cut)
        #expect(kept == ["0000000000000001.wal.from-\(third)"])
        #expect(repaired.store.session(token: tokens[1], now: now) != nil)
        #expect(repaired.store.session(token: tokens[2], now: now) == nil)
        // Appends go on after the cut, and the next start is clean.
        _ = try await durably { done throws(StoreError) in
            try repaired.store.createSession(for: Self.bob, now: now, ttl: 3600, idle: 3600, data: nil, completion: done)
        }
        await repaired.close()
        let reopened = try RunningStore(directory, now: now)
        #expect(reopened.store.statistics.sessions == 3)
        await reopened.close()
    }

    @Test("many concurrent changes all complete, and are all there after a restart", arguments: [
        Store.Configuration.Durability.always, .batch(interval: .milliseconds(5)), .off,
    ])
    func concurrentChanges(_ durability: Store.Configuration.Durability) async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var configuration = Store.Configuration()
        configuration.durability = durability
        configuration.segmentBytes = 8192
        let running = try RunningStore(directory, configuration: configuration, now: now)
        // One first, alone: the first segment then holds a record, so the 28 KB that follow must cut.
        let (first, _) = try await durably { [now] done throws(StoreError) in
            try running.store.createSession(for: Principal(issuer: "apple", sub: "user0"), now: now, ttl: 3600, idle: 3600, data: nil, completion: done)
        }
        let tokens = try await [first] + withThrowingTaskGroup(of: String.self) { group in
            for n in 1..<400 {
                group.addTask { [now] in
                    let principal = Principal(issuer: "apple", sub: "user\(n % 37)")
                    let (token, _) = try await durably { done throws(StoreError) in
                        try running.store.createSession(for: principal, now: now, ttl: 3600, idle: 3600, data: nil, completion: done)
                    }
                    return token
                }
            }
            return try await group.reduce(into: []) { $0.append($1) }
        }
        let statistics = running.store.statistics
        #expect(statistics.records == 400)
        if durability == .always {
            #expect(statistics.syncs >= 1 && statistics.syncs <= 400)
            #expect(statistics.recordsPerSync >= 1)
        }
        await running.close()
        // Segments of 8 KiB (a batch larger than that gets one of its own), read back in order.
        let segments = try WALDirectory(stateDirectory: directory.path).readSegments()
        #expect(segments.count >= 2)
        let reopened = try RunningStore(directory, configuration: configuration, now: now)
        #expect(reopened.store.statistics.sessions == 400)
        for token in tokens { #expect(reopened.store.session(token: token, now: now) != nil) }
        #expect(reopened.store.statistics.users == 37)
        await reopened.close()
    }

    @Test("a change's completion runs only once its record is in the log file", arguments: [
        Store.Configuration.Durability.always, .batch(interval: .seconds(5)), .off,
    ])
    func completionAfterWrite(_ durability: Store.Configuration.Durability) async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var configuration = Store.Configuration()
        configuration.durability = durability
        let running = try RunningStore(directory, configuration: configuration, now: now)
        let segment = WALDirectory(stateDirectory: directory.path).segmentPath(1)
        let sub = "completion-check-\(UUID())"
        let inFileAtCompletion = try await durably { done throws(StoreError) -> Bool in
            _ = try running.store.createSession(for: Principal(issuer: "apple", sub: sub), now: now, ttl: 60, idle: 60, data: nil) { result in
                // Read the file from the completion itself: what a crash right now would leave.
                let bytes = (try? Data(contentsOf: URL(fileURLWithPath: segment))) ?? Data()
                marker.withLock { $0 = bytes.range(of: Data(sub.utf8)) != nil }
                done(result)
            }
            return true
        }
        #expect(inFileAtCompletion)
        #expect(marker.withLock { $0 })
        await running.close()
    }

    @Test("deleting a user removes their record and sessions, durably")
    func deleteUser() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var running = try RunningStore(directory, now: now)
        for _ in 0..<3 {
            _ = try await durably { [running, now] done throws(StoreError) in
                try running.store.createSession(for: Self.alice, now: now, ttl: 3600, idle: 3600, data: nil, completion: done)
            }
        }
        let (bobToken, _) = try await durably { [running, now] done throws(StoreError) in
            try running.store.createSession(for: Self.bob, now: now, ttl: 3600, idle: 3600, data: nil, completion: done)
        }
        let deleted = try await durably { [running, now] done throws(StoreError) in
            try running.store.deleteUser(Self.alice, now: now, completion: done)
        }
        #expect(deleted.deleted && deleted.sessions == 3)
        let nothing = try await durably { [running, now] done throws(StoreError) in
            try running.store.deleteUser(Self.alice, now: now, completion: done)
        }
        #expect(!nothing.deleted)
        await running.close()
        running = try RunningStore(directory, now: now)
        #expect(running.store.user(Self.alice) == nil)
        #expect(running.store.sessions(of: Self.alice, now: now).isEmpty)
        #expect(running.store.session(token: bobToken, now: now) != nil)
        await running.close()
    }
}
