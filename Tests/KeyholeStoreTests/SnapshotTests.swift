import Foundation
import KeyholeProtocol
import Testing
@testable import KeyholeStore

/// Snapshots on real files: the round trip, the log they make redundant, fuzzy chunks under concurrent
/// changes, corruption and --repair, leftovers of a crash.
@Suite("Snapshots", .serialized)
struct SnapshotTests {
    static let alice = Principal(issuer: "apple", sub: "alice")
    let now: Int64 = 1_800_000_000

    /// Creates `count` sessions spread over `principals` principals; returns their tokens.
    func createSessions(_ store: Store, count: Int, principals: Int = 7, data: Bool = true) async throws -> [String] {
        var tokens: [String] = []
        for n in 0..<count {
            let principal = Principal(issuer: n % 3 == 0 ? "apple" : "local", sub: "user-\(n % principals)")
            let json: [UInt8]? = data && n % 2 == 0 ? Array(#"{"n":\#(n),"cart":["a","b"]}"#.utf8) : nil
            let (token, _) = try await durably { done throws(StoreError) in
                try store.createSession(for: principal, now: now + Int64(n), ttl: 86_400, idle: 7200, data: json, completion: done)
            }
            tokens.append(token)
        }
        return tokens
    }

    func files(_ directory: TemporaryStateDirectory, _ sub: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: directory.path + "/" + sub).sorted()
    }

    @Test("a snapshot and the log after it give back every session and user; the log it covers is deleted")
    func roundTrip() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var configuration = Store.Configuration()
        configuration.snapshotChunk = 3
        var running = try RunningStore(directory, configuration: configuration, now: now)
        var tokens = try await createSessions(running.store, count: 40)
        _ = try await durably { [running] done throws(StoreError) in
            try running.store.updateUser(Self.alice, now: now + 50, completion: done) { $0.fields["email"] = "alice@example.com" }
        }
        // One touch that is logged, one that is not (within the touch interval).
        #expect(running.store.session(token: tokens[0], now: now + 600) != nil)
        #expect(running.store.session(token: tokens[0], now: now + 620)?.session.lastSeenAt == now + 620)
        let before = running.store.state.withLock { $0.tables.dump() }

        let report = try await running.store.snapshot(now: now + 700)
        #expect(report.sessions == 40)
        #expect(report.users == 14 + 1)
        #expect(report.walBytesRemoved > 0)
        #expect(report.longestPauseMicroseconds > 0 && report.longestPauseMicroseconds <= (report.milliseconds + 1) * 1000)
        #expect(try files(directory, "snapshots") == [SnapshotHeader.fileName(report.startLSN)])
        // Only the segment started for the snapshot is left, holding the barrier record.
        #expect(try files(directory, "wal") == ["0000000000000002.wal"])
        #expect(running.store.statistics.lastSnapshot == report)
        #expect(running.store.statistics.walBytes < 100)

        // Changes after the snapshot come from the log.
        _ = try await durably { [running] done throws(StoreError) in
            try running.store.revokeSession(token: tokens[1], now: now + 800, completion: done)
        }
        tokens += try await createSessions(running.store, count: 2, data: false)
        let after = running.store.state.withLock { $0.tables.dump() }
        await running.close()

        running = try RunningStore(directory, configuration: configuration, now: now + 900)
        #expect(running.report.snapshotLSN == report.startLSN)
        #expect(running.report.snapshotSessions == 40)
        // The barrier, the revoke and two creates; and the touch, when the committer had not written it
        // before the cut (it is queued quietly, with nobody waiting for it).
        #expect((4...5).contains(running.report.replayed))
        #expect(running.store.state.withLock { $0.tables.dump() } == after)
        #expect(after != before)
        #expect(running.store.session(token: tokens[1], now: now + 900) == nil)
        let found = try #require(running.store.session(token: tokens[2], now: now + 900))
        #expect(found.session.data == Array(#"{"n":2,"cart":["a","b"]}"#.utf8))
        #expect(running.store.user(Self.alice)?.fields["email"] == "alice@example.com")
        // The unlogged touch is in the snapshot: last_seen_at is the later one.
        let firstID = try #require(SessionToken.digest(tokens[0])).0
        let first = running.store.sessions(of: Principal(issuer: "apple", sub: "user-0"), now: now + 900).first { $0.id == firstID }
        #expect(first?.lastSeenAt == now + 620)
        await running.close()

        let disk = try directory.allBytes()
        for token in tokens {
            #expect(disk.firstRange(of: Array(token.utf8)) == nil, "a token is in the state directory")
        }
    }

    @Test("a snapshot taken in small chunks while changes go on restores exactly the final state")
    func fuzzy() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var configuration = Store.Configuration()
        configuration.snapshotChunk = 1
        let running = try RunningStore(directory, configuration: configuration, now: now)
        let store = running.store
        let tokens = try await createSessions(store, count: 200, principals: 13)
        let now = self.now
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for _ in 0..<3 { _ = try await store.snapshot(now: now + 300) }
            }
            group.addTask {
                // Revokes, creates, user changes, deletions, moves and outbox work while the snapshots are cut.
                var queued: [UInt64] = []
                for n in 0..<210 {
                    let principal = Principal(issuer: "local", sub: "user-\(n % 13)")
                    if n % 7 == 5 {
                        // A move is several records: a chunk may hold the user at either sub, or both.
                        _ = try await durably { done throws(StoreError) in
                            _ = try store.moveUser(principal, to: Principal(issuer: "local", sub: "moved-\(n)"), now: now + 200, completion: done) {
                                $0.fields["moved_at"] = .int(Int64(n))
                            }
                        }
                        continue
                    }
                    if n % 7 == 6 {
                        let entry = try await durably { done throws(StoreError) in
                            try store.addOutbox(("test.work", ["n": .int(Int64(n))]), now: now + 200, completion: done)
                        }
                        queued.append(entry.id)
                        if queued.count > 1, n % 2 == 0 {
                            let id = queued.removeFirst()
                            _ = try await durably { done throws(StoreError) in try store.completeOutbox(id, completion: done) }
                        }
                        continue
                    }
                    _ = try await durably { done throws(StoreError) in
                        switch n % 7 {
                        case 0: _ = try store.revokeSession(token: tokens[n % tokens.count], now: now + 200, completion: done)
                        case 1: _ = try store.updateUser(principal, now: now + 200, completion: done) { $0.fields["email"] = .string("u\(n)@example.com") }
                        case 2: _ = try store.deleteUser(principal, now: now + 200, completion: done)
                        case 3: _ = try store.revokeSessions(of: principal, now: now + 200, completion: done)
                        default:
                            _ = try store.createSession(for: principal, now: now + 200, ttl: 3600, idle: 3600, data: nil, completion: done)
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
        let final = store.state.withLock { $0.tables.dump() }
        #expect(store.statistics.snapshots == 3)
        #expect(final.contains { $0.hasPrefix("user local/moved-") } && final.contains { $0.hasPrefix("outbox ") })
        await running.close()

        let reopened = try RunningStore(directory, configuration: configuration, now: now + 300)
        #expect(reopened.report.snapshotLSN != nil)
        #expect(reopened.store.state.withLock { $0.tables.dump() } == final)
        await reopened.close()
    }

    @Test("an unreadable snapshot stops start-up naming file and offset; --repair sets it aside and replays the log left")
    func corruption() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var running: RunningStore? = try RunningStore(directory, now: now)
        let early = try await createSessions(running!.store, count: 5)
        let report = try await running!.store.snapshot(now: now + 100)
        let late = try await createSessions(running!.store, count: 3)
        await running!.close()
        running = nil

        let path = SnapshotDirectory(stateDirectory: directory.path).snapshotPath(report.startLSN)
        let original = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        var damaged = original
        damaged[SnapshotHeader.size + 30] ^= 0x01
        try Data(damaged).write(to: URL(fileURLWithPath: path))
        do {
            _ = try openStore(directory.path, now: now + 200)
            Issue.record("a damaged snapshot opened")
        } catch {
            #expect(error.isCorruption)
            #expect(error.message.contains(path))
            #expect(error.message.contains("offset \(SnapshotHeader.size)"))
        }
        // Cut short: the counts in the header do not match.
        try Data(original.prefix(original.count - 10)).write(to: URL(fileURLWithPath: path))
        #expect(throws: StoreError.corrupt(file: "", offset: 0, "")) {
            _ = try openStore(directory.path, now: now + 200)
        }

        let repaired = try RunningStore(directory, repair: true, now: now + 200)
        #expect(repaired.report.lostSnapshots == 1)
        #expect(repaired.report.snapshotLSN.map { $0 > report.startLSN } == true)
        let cut = try #require(repaired.report.cutDirectory)
        #expect(try FileManager.default.contentsOfDirectory(atPath: cut) == [SnapshotHeader.fileName(report.startLSN)])
        #expect(early.allSatisfy { repaired.store.session(token: $0, now: now + 200) == nil })
        #expect(late.allSatisfy { repaired.store.session(token: $0, now: now + 200) != nil })
        await repaired.close()
        let reopened = try RunningStore(directory, now: now + 200)
        #expect(reopened.store.statistics.sessions == 3)
        await reopened.close()
    }

    /// A snapshot file made of `entries` (bodies), with the header counting `principals` and `sessions`.
    static func snapshotFile(_ entries: [[UInt8]], principals: UInt64, sessions: UInt64) -> [UInt8] {
        var bytes = SnapshotHeader(startLSN: 5, createdAt: 1, principals: principals, sessions: sessions).encoded
        for (index, body) in entries.enumerated() {
            bytes.appendFramed(sequence: UInt64(index)) { $0 += body }
        }
        return bytes
    }

    static func principal(_ sub: String, user: Bool) -> [UInt8] {
        var body: [UInt8] = []
        let principal = Principal(issuer: "local", sub: sub)
        SnapshotEntry.appendPrincipal(principal, userJSON: user ? User(principal: principal, createdAt: 1, updatedAt: 2).recordJSON : nil, to: &body)
        return body
    }

    static func session(_ n: UInt64, data: String? = nil) -> [UInt8] {
        var body: [UInt8] = []
        SnapshotEntry.appendSession(
            SnapshotEntry.SessionState(
                id: SessionID(high: n, low: n), check: SessionCheck(high: n, low: 0), createdAt: 10, expiresAt: 99,
                idleSeconds: 50, lastSeenAt: 20, data: data.map { Array($0.utf8) }),
            to: &body)
        return body
    }

    static let badSnapshots: [(String, [UInt8], String)] = {
        let good = snapshotFile([principal("a", user: false), session(1), principal("b", user: true)], principals: 2, sessions: 1)
        var badCRC = good
        badCRC[good.count - 3] ^= 0x40
        var badHeader = good
        badHeader[30] ^= 1
        return [
            ("short", Array(good.prefix(20)), "shorter than its header"),
            ("magic", [0] + good.dropFirst(), "not a keyholed snapshot"),
            ("header", badHeader, "header is damaged"),
            ("entry CRC", badCRC, "CRC does not match"),
            ("cut short", Array(good.dropLast(5)), "cut short"),
            ("count", snapshotFile([principal("a", user: true)], principals: 2, sessions: 0), "where the header counts"),
            ("extra", snapshotFile([principal("a", user: true), principal("b", user: true)], principals: 1, sessions: 0), "more entries"),
            ("orphan session", snapshotFile([session(1), principal("a", user: true)], principals: 1, sessions: 1), "before any principal"),
            ("empty principal", snapshotFile([principal("a", user: false), principal("b", user: true)], principals: 2, sessions: 0), "neither user nor sessions"),
            ("data", snapshotFile([principal("a", user: false), session(1, data: "[1]")], principals: 1, sessions: 1), "does not parse"),
            ("type", snapshotFile([[0x20, 0, 1, 0x61, 0, 1, 0x62, 0, 0, 0, 0]], principals: 1, sessions: 0), "type 0x20"),
            ("zero length", good.prefix(SnapshotHeader.size) + [0, 0, 0, 0, 0, 0, 0, 0], "length of 0"),
        ] + OutboxTests.badFiles
    }()

    @Test("a snapshot file that cannot be read whole is corruption, with its offset", arguments: badSnapshots)
    func badSnapshot(name: String, bytes: [UInt8], reason: String) throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let path = directory.path + "/" + SnapshotHeader.fileName(5)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        var tables = StoreTables()
        do {
            _ = try SnapshotReader.load(path, into: &tables, blockBytes: 7)
            Issue.record("\(name): loaded")
        } catch {
            #expect(error.isCorruption, "\(name)")
            #expect(error.message.contains(path) && error.message.contains(reason), "\(name): \(error.message)")
        }
    }

    @Test("a well-formed snapshot loads, read in blocks of any size, and a repeated session is replaced", arguments: [1, 7, 64, 1 << 20])
    func goodSnapshot(blockBytes: Int) throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let path = directory.path + "/" + SnapshotHeader.fileName(5)
        let file = Self.snapshotFile(
            [Self.principal("a", user: false), Self.session(1, data: #"{"k":1}"#), Self.session(2), Self.principal("b", user: true),
             Self.principal("a", user: true), Self.session(1)],
            principals: 3, sessions: 3)
        try Data(file).write(to: URL(fileURLWithPath: path))
        var tables = StoreTables()
        let header = try SnapshotReader.load(path, into: &tables, blockBytes: blockBytes)
        #expect(header.startLSN == 5)
        #expect(tables.sessionCount == 2)
        #expect(tables.userCount == 2)
        let a = Principal(issuer: "local", sub: "a")
        #expect(tables.sessions(of: a, now: 30).map(\.id.high).sorted() == [1, 2])
        #expect(tables.sessions(of: a, now: 30).first { $0.id.high == 1 }?.data == nil)
        #expect(tables.sessions(of: a, now: 30).first?.lastSeenAt == 20)
    }

    @Test("start-up deletes what a crash in the middle of a snapshot left: a .tmp file, an older snapshot, covered segments")
    func leftovers() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var running = try RunningStore(directory, now: now)
        let tokens = try await createSessions(running.store, count: 4)
        let walBefore = try files(directory, "wal")
        // A second name keeps the segment as the snapshot's cut leaves it (trimmed of its zeros).
        let firstSegment = directory.path + "/wal/" + walBefore[0]
        try FileManager.default.linkItem(atPath: firstSegment, toPath: directory.path + "/kept")
        let report = try await running.store.snapshot(now: now + 100)
        await running.close()
        // As if the deletions after the rename had not happened, and another snapshot had been cut short.
        try FileManager.default.moveItem(atPath: directory.path + "/kept", toPath: firstSegment)
        let snapshots = directory.path + "/snapshots/"
        try Data([1, 2, 3]).write(to: URL(fileURLWithPath: snapshots + SnapshotHeader.fileName(1)))
        try Data([4, 5, 6]).write(to: URL(fileURLWithPath: snapshots + SnapshotHeader.fileName(report.startLSN + 9) + ".tmp"))

        running = try RunningStore(directory, now: now + 200)
        #expect(running.report.snapshotLSN == report.startLSN)
        #expect(try files(directory, "snapshots") == [SnapshotHeader.fileName(report.startLSN)])
        #expect(try files(directory, "wal") == ["0000000000000002.wal"])
        #expect(tokens.allSatisfy { running.store.session(token: $0, now: now + 200) != nil })
        await running.close()
    }

    @Test("the committer signals the snapshotter once when the log passes snapshot_wal_bytes")
    func signal() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var configuration = Store.Configuration()
        configuration.snapshotWALBytes = 2048
        let running = try RunningStore(directory, configuration: configuration, now: now)
        #expect(!running.store.snapshotDue)
        _ = try await createSessions(running.store, count: 30)
        #expect(running.store.snapshotDue)
        var signals = running.store.snapshotSignals.makeAsyncIterator()
        #expect(await signals.next() != nil)
        let report = try await running.store.snapshot(now: now + 100)
        #expect(report.sessions == 30)
        #expect(!running.store.snapshotDue)
        running.store.snapshotSignalHandled()
        await running.close()
    }

    @Test("the snapshotter's snapshot is skipped when it is no longer due once it may run (an admin.snapshot took one meanwhile)")
    func snapshotIfDue() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var configuration = Store.Configuration()
        configuration.snapshotWALBytes = 2048
        configuration.snapshotWALPercent = 0
        let running = try RunningStore(directory, configuration: configuration, now: now)
        _ = try await createSessions(running.store, count: 30)
        #expect(running.store.snapshotDue)
        _ = try await running.store.snapshot(now: now + 100)
        #expect(try await running.store.snapshotIfDue(now: now + 101) == nil)
        #expect(running.store.statistics.snapshots == 1)
        _ = try await createSessions(running.store, count: 30)
        let report = try await running.store.snapshotIfDue(now: now + 200)
        #expect(report?.sessions == 60 && running.store.statistics.snapshots == 2)
        await running.close()
    }

    @Test("the next snapshot waits for the log to reach snapshot_wal_percent of the last one's size, if that is past snapshot_wal_bytes; after a restart too; 0 leaves snapshot_wal_bytes alone")
    func proportional() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var configuration = Store.Configuration()
        configuration.snapshotWALBytes = 2048
        configuration.snapshotWALPercent = 100
        var running = try RunningStore(directory, configuration: configuration, now: now)
        #expect(running.store.snapshotThreshold == 2048, "no snapshot yet: the floor")
        _ = try await createSessions(running.store, count: 400)
        let first = try await running.store.snapshot(now: now + 500)
        #expect(first.bytes > 8192, "\(first.bytes) bytes: well past the floor, for the test to mean something")
        #expect(running.store.snapshotThreshold == first.bytes)
        #expect(running.store.statistics.snapshotAtWALBytes == first.bytes)
        // Past the floor, short of the snapshot's size: not due (with the floor alone, it was).
        while running.store.statistics.walBytes < 4096 { _ = try await createSessions(running.store, count: 10) }
        #expect(running.store.statistics.walBytes < first.bytes)
        #expect(!running.store.snapshotDue)
        while running.store.statistics.walBytes < first.bytes { _ = try await createSessions(running.store, count: 10) }
        #expect(running.store.snapshotDue)
        await running.close()

        // Start-up takes the size of the snapshot it loads.
        running = try RunningStore(directory, configuration: configuration, now: now + 600)
        #expect(running.store.snapshotThreshold == first.bytes)
        await running.close()
        // 200 %: twice that; 0: the floor alone.
        configuration.snapshotWALPercent = 200
        running = try RunningStore(directory, configuration: configuration, now: now + 600)
        #expect(running.store.snapshotThreshold == 2 * first.bytes)
        await running.close()
        configuration.snapshotWALPercent = 0
        running = try RunningStore(directory, configuration: configuration, now: now + 600)
        #expect(running.store.snapshotThreshold == 2048)
        #expect(running.store.snapshotDue)
        await running.close()
        configuration.snapshotWALBytes = nil
        running = try RunningStore(directory, configuration: configuration, now: now + 600)
        #expect(running.store.snapshotThreshold == nil && !running.store.snapshotDue, "only when asked for")
        await running.close()
    }
}

extension StoreTables {
    /// Every live session and user as text, sorted: equal dumps are equal tables.
    func dump() -> [String] {
        var lines: [String] = []
        for slot in 0..<sessionSlots.count {
            let entry = sessionSlots[UInt32(slot)]
            guard entry.principal != Self.none else { continue }
            let principal = principalSlots[entry.principal].key
            lines.append("session \(entry.id) \(principal) \(entry.createdAt) \(entry.expiresAt) \(entry.idleSeconds) "
                + "\(entry.data.map { String(decoding: $0, as: UTF8.self) } ?? "-")")
        }
        for slot in 0..<principalSlots.count {
            let entry = principalSlots[UInt32(slot)]
            if let user = entry.user { lines.append("user \(entry.key) \(String(decoding: User(entry.key, user).recordJSON, as: UTF8.self))") }
        }
        for (id, entry) in outbox {
            lines.append("outbox \(id) \(entry.kind) \(entry.createdAt) \(JSONValue.object(entry.payload).jsonText)")
        }
        return lines.sorted()
    }
}
