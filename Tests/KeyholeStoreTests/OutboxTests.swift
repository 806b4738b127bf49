import Foundation
import KeyholeProtocol
import Testing
@testable import KeyholeStore

/// The outbox: work owed outside that the log keeps until it is done, through restarts, snapshots and
/// user deletions.
@Suite("Outbox", .serialized)
struct OutboxTests {
    static let alice = Principal(issuer: "apple", sub: "alice")
    let now: Int64 = 1_800_000_000

    func add(_ store: Store, _ kind: String, _ payload: [String: JSONValue], at time: Int64) async throws -> OutboxEntry {
        try await durably { done throws(StoreError) in try store.addOutbox((kind, payload), now: time, completion: done) }
    }

    @Test("entries survive a restart until marked done; done twice is a no-op")
    func restart() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var running = try RunningStore(directory, now: now)
        let first = try await add(running.store, "apple.revoke", ["sub": "a"], at: now)
        let second = try await add(running.store, "other", ["n": .int(2)], at: now + 1)
        let third = try await add(running.store, "apple.revoke", ["sub": "c"], at: now + 2)
        #expect(Set([first.id, second.id, third.id]).count == 3)
        let completed = try await durably { [running] done throws(StoreError) in try running.store.completeOutbox(first.id, completion: done) }
        let again = try await durably { [running] done throws(StoreError) in try running.store.completeOutbox(first.id, completion: done) }
        #expect(completed && !again)
        #expect(running.store.statistics.outbox == 2)
        await running.close()

        running = try RunningStore(directory, now: now + 10)
        #expect(running.store.outbox() == [second, third])
        #expect(running.store.outbox(kind: "apple.revoke") == [third])
        #expect(running.store.statistics.outbox == 2)
        await running.close()
    }

    @Test("deleting a user adds the entry built from their record in the same change; nothing when it returns nil")
    func deleteWithEntry() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var running = try RunningStore(directory, now: now)
        let bob = Principal(issuer: "apple", sub: "bob")
        for principal in [Self.alice, bob] {
            _ = try await durably { [running] done throws(StoreError) in
                try running.store.updateUser(principal, now: now, completion: done) {
                    $0.fields["ext"] = .object(["apple": .object(["refresh_token": .string("sealed-\(principal.sub)")])])
                }
            }
            _ = try await durably { [running] done throws(StoreError) in
                try running.store.createSession(for: principal, now: now, ttl: 3600, idle: 600, data: nil, completion: done)
            }
        }
        let deleted = try await durably { [running] done throws(StoreError) in
            try running.store.deleteUser(Self.alice, now: now + 5, completion: done) { user in
                guard case .object(let ext)? = user.fields["ext"], case .object(let apple)? = ext["apple"], let token = apple["refresh_token"] else { return nil }
                return ("apple.revoke", ["sub": .string(user.principal.sub), "refresh_token": token])
            }
        }
        #expect(deleted.deleted && deleted.sessions == 1)
        #expect(deleted.outbox?.payload == ["sub": "alice", "refresh_token": "sealed-alice"])
        #expect(deleted.outbox?.createdAt == now + 5)
        let withoutWork = try await durably { [running] done throws(StoreError) in
            try running.store.deleteUser(bob, now: now + 6, completion: done) { _ in nil }
        }
        #expect(withoutWork.deleted && withoutWork.outbox == nil)
        let nobody = try await durably { [running] done throws(StoreError) in
            try running.store.deleteUser(Self.alice, now: now + 7, completion: done) { _ in ("apple.revoke", [:]) }
        }
        #expect(!nobody.deleted && nobody.outbox == nil)
        await running.close()

        running = try RunningStore(directory, now: now + 10)
        #expect(running.store.user(Self.alice) == nil && running.store.sessions(of: Self.alice, now: now + 10).isEmpty)
        #expect(running.store.outbox() == [deleted.outbox!])
        await running.close()
    }

    @Test("a snapshot keeps the outbox (format 2); what is done after it comes from the log")
    func snapshot() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var running = try RunningStore(directory, now: now)
        var entries: [OutboxEntry] = []
        for n in 0..<5 { entries.append(try await add(running.store, "apple.revoke", ["n": .int(Int64(n))], at: now + Int64(n))) }
        _ = try await durably { [running] done throws(StoreError) in
            try running.store.createSession(for: Self.alice, now: now, ttl: 3600, idle: 600, data: nil, completion: done)
        }
        let report = try await running.store.snapshot(now: now + 10)
        let file = try [UInt8](Data(contentsOf: URL(fileURLWithPath: directory.path + "/snapshots/" + SnapshotHeader.fileName(report.startLSN))))
        #expect(file[7] == 2)
        #expect(file.bigEndianUInt64(at: 40) == 5)
        _ = try await durably { [running] done throws(StoreError) in try running.store.completeOutbox(entries[2].id, completion: done) }
        await running.close()

        running = try RunningStore(directory, now: now + 20)
        #expect(running.report.snapshotLSN == report.startLSN)
        #expect(running.store.outbox() == entries.enumerated().filter { $0.offset != 2 }.map(\.element))
        #expect(running.store.sessions(of: Self.alice, now: now + 20).count == 1)
        await running.close()
    }

    @Test("a snapshot of format 1 (48-byte header, no outbox) still loads")
    func formatOne() throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var bytes: [UInt8] = [0x4B, 0x48, 0x53, 0x4E, 0x50, 0x00, 0x00, 0x01]
        bytes.appendBigEndian(UInt64(5))
        bytes.appendBigEndian(Int64(1))
        bytes.appendBigEndian(UInt64(1))
        bytes.appendBigEndian(UInt64(1))
        bytes.appendBigEndian(CRC32C.checksum(bytes))
        bytes += [0, 0, 0, 0]
        #expect(bytes.count == SnapshotHeader.format1Size)
        bytes.appendFramed(sequence: 0) { $0 += SnapshotTests.principal("a", user: false) }
        bytes.appendFramed(sequence: 1) { $0 += SnapshotTests.session(1) }
        let path = directory.path + "/" + SnapshotHeader.fileName(5)
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        var tables = StoreTables()
        let header = try SnapshotReader.load(path, into: &tables, blockBytes: 3)
        #expect(header.startLSN == 5 && header.outbox == 0)
        #expect(tables.sessionCount == 1 && tables.outbox.isEmpty)
    }

    static func outboxEntry(_ id: UInt64) -> [UInt8] {
        var body: [UInt8] = []
        SnapshotEntry.appendOutbox(OutboxEntry(id: id, kind: "k", createdAt: 1, payload: ["i": .int(Int64(id))]), to: &body)
        return body
    }

    static func file(_ entries: [[UInt8]], principals: UInt64, sessions: UInt64, outbox: UInt64) -> [UInt8] {
        var bytes = SnapshotHeader(startLSN: 5, createdAt: 1, principals: principals, sessions: sessions, outbox: outbox).encoded
        for (index, body) in entries.enumerated() { bytes.appendFramed(sequence: UInt64(index)) { $0 += body } }
        return bytes
    }

    static let badFiles: [(String, [UInt8], String)] = {
        var newer = file([outboxEntry(1)], principals: 0, sessions: 0, outbox: 1)
        newer[7] = 3
        return [
            ("after a principal", file([SnapshotTests.principal("a", user: true), outboxEntry(1)], principals: 1, sessions: 0, outbox: 1), "outbox entry after a principal"),
            ("count", file([outboxEntry(1), outboxEntry(2)], principals: 0, sessions: 0, outbox: 1), "more entries"),
            ("missing", file([outboxEntry(1)], principals: 0, sessions: 0, outbox: 2), "where the header counts"),
            ("newer format", newer, "format 3, newer than this keyholed"),
        ]
    }()

    @Test("taking a change back restores the outbox as it was")
    func rollBack() {
        var tables = StoreTables()
        let entry = OutboxEntry(id: 9, kind: "k", createdAt: 1, payload: [:])
        var undo: [StoreTables.Undo]? = []
        tables.setOutbox(9, entry, undo: &undo)
        var none: [StoreTables.Undo]? = nil
        tables.setOutbox(10, entry, undo: &none)
        var second: [StoreTables.Undo]? = []
        tables.setOutbox(10, nil, undo: &second)
        tables.rollBack(second!)
        tables.rollBack(undo!)
        #expect(tables.outbox == [10: entry])
    }
}
