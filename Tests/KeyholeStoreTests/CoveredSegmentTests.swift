import Foundation
import Testing
@testable import KeyholeStore

/// The log a snapshot leaves behind: segments it covers (left by a crash while they were deleted), and
/// a log that ends before the snapshot's start.
@Suite("The log around a snapshot's start", .serialized)
struct CoveredSegmentTests {
    let now: Int64 = 1_800_000_000

    /// Small segments, no snapshots but those asked for, and no touches (reads must not write).
    static func configuration() -> Store.Configuration {
        var configuration = Store.Configuration()
        configuration.segmentBytes = 1024
        configuration.snapshotWALBytes = nil
        configuration.touchInterval = 1 << 30
        return configuration
    }

    func createSessions(_ store: Store, _ prefix: String, count: Int) async throws -> [String] {
        var tokens: [String] = []
        for n in 0..<count {
            let (token, _) = try await durably { done throws(StoreError) in
                try store.createSession(
                    for: Principal(issuer: "local", sub: "\(prefix)-\(n % 5)"), now: now, ttl: 86_400, idle: 7200,
                    data: Array(#"{"n":\#(n)}"#.utf8), completion: done)
            }
            tokens.append(token)
        }
        return tokens
    }

    static func files(_ path: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: path).filter { $0.hasSuffix(".wal") }.sorted()
    }

    @Test("a crash while covered segments are deleted, leaving any subset of them: the store starts, nothing is lost, and they go",
        .timeLimit(.minutes(2)))
    func anySubsetLeft() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let wal = directory.path + "/wal"
        let kept = directory.path + "/kept"
        try FileManager.default.createDirectory(atPath: kept, withIntermediateDirectories: false)

        var running = try RunningStore(directory, configuration: Self.configuration(), now: now)
        var tokens = try await createSessions(running.store, "before", count: 40)
        // A second name keeps each segment as the snapshot's cut leaves it (every one trimmed of its zeros).
        let covered = try Self.files(wal)
        #expect(covered.count >= 4, "\(covered)")
        for name in covered { try FileManager.default.linkItem(atPath: "\(wal)/\(name)", toPath: "\(kept)/\(name)") }
        let report = try await running.store.snapshot(now: now)
        #expect(report.walBytesRemoved > 0)
        tokens += try await createSessions(running.store, "after", count: 12)
        let expected = running.store.state.withLock { $0.tables.dump() }
        await running.close()
        let left = try Self.files(wal)
        #expect(Set(left).isDisjoint(with: covered))

        // Every subset: a hole below the snapshot's cut (a later covered segment deleted before an
        // earlier one, in directory order) included.
        for mask in 0..<(1 << covered.count) {
            let subset = covered.indices.filter { mask & (1 << $0) != 0 }.map { covered[$0] }
            for name in subset { try FileManager.default.linkItem(atPath: "\(kept)/\(name)", toPath: "\(wal)/\(name)") }
            do {
                running = try RunningStore(directory, configuration: Self.configuration(), now: now)
            } catch {
                Issue.record("with \(subset) left: \(error)")
                for name in subset { try? FileManager.default.removeItem(atPath: "\(wal)/\(name)") }
                continue
            }
            #expect(running.report.warnings.isEmpty, "\(subset): \(running.report.warnings)")
            #expect(running.report.lostRecords == 0)
            #expect(running.store.state.withLock { $0.tables.dump() } == expected, "\(subset)")
            #expect(tokens.allSatisfy { running.store.session(token: $0, now: now) != nil }, "\(subset)")
            // The covered segments left are deleted at start-up.
            #expect(try Self.files(wal) == left, "\(subset)")
            await running.close()
        }
    }

    @Test("a log that ends before the snapshot's start: appends go to a new segment starting there, and survive a restart")
    func logEndsBeforeSnapshot() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let wal = directory.path + "/wal"
        var configuration = Self.configuration()
        configuration.segmentBytes = 64 << 20
        var running = try RunningStore(directory, configuration: configuration, now: now)
        var tokens = try await createSessions(running.store, "early", count: 3)
        await running.close()
        // The log as it was then: it ends well before the snapshot taken below.
        let early = try Data(contentsOf: URL(fileURLWithPath: "\(wal)/0000000000000001.wal"))

        running = try RunningStore(directory, configuration: configuration, now: now)
        tokens += try await createSessions(running.store, "late", count: 3)
        let report = try await running.store.snapshot(now: now)
        await running.close()
        for name in try Self.files(wal) { try FileManager.default.removeItem(atPath: "\(wal)/\(name)") }
        try early.write(to: URL(fileURLWithPath: "\(wal)/0000000000000001.wal"))

        running = try RunningStore(directory, configuration: configuration, now: now)
        #expect(running.report.snapshotLSN == report.startLSN)
        #expect(running.store.writer.nextLSN == report.startLSN)
        #expect(running.store.writer.sequence == 2)
        tokens += try await createSessions(running.store, "next", count: 2)
        await running.close()

        running = try RunningStore(directory, configuration: configuration, now: now)
        #expect(running.report.warnings.isEmpty, "\(running.report.warnings)")
        #expect(tokens.allSatisfy { running.store.session(token: $0, now: now) != nil })
        #expect(running.store.statistics.sessions == tokens.count)
        // The early segment is below the new one's start: covered, and deleted.
        #expect(try Self.files(wal) == ["0000000000000002.wal"])
        await running.close()
    }
}
