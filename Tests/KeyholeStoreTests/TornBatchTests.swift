import Foundation
import Testing
@testable import KeyholeStore

/// A power cut while the store's last batch was written: later sectors of it reached the disk, earlier
/// ones did not. None of its changes was answered (its sync never returned), so start-up cuts it whole
/// and starts without an operator; the same damage anywhere else is still refused.
@Suite("A power cut inside the last batch, on a real store")
struct TornBatchTests {
    let now: Int64 = 1_780_000_000
    /// The parts of the batch that never reached the disk: those of WALBatchRecoveryTests' losses
    /// that lie at its start (this batch's end is not known when they are chosen).
    static let losses = ["its first 4 KiB", "the page holding its start", "a page in its middle"]

    func create(_ store: Store, _ sub: String, data: Int, _ outcomes: InlineCommitTests.Outcomes) throws -> String {
        try store.createSession(
            for: Principal(issuer: "local", sub: sub), now: now, ttl: 3600, idle: 3600,
            data: Array(#"{"pad":"\#(String(repeating: "x", count: data))"}"#.utf8), completion: outcomes.completion
        ).token
    }

    @Test("the last batch cut whole: the store starts with everything before it; with a batch after it, refused",
        arguments: losses, [false, true])
    func tornLastBatch(lost: String, followed: Bool) async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        // Every commit is the test's to run (as an event loop would after its pass): one batch each.
        var configuration = InlineCommitTests.quiet()
        // However slow this machine's syncs, commits stay the loop's (no pause to the committer thread).
        configuration.inlineSyncLimit = .seconds(3600)
        let running = try RunningStore(directory, configuration: configuration, now: now)
        let loop = InlineCommitTests.HeldCommits()
        running.store.commitInline(using: loop.scheduler)
        try await committerIdle(running.store)
        let outcomes = InlineCommitTests.Outcomes()
        var before: [String] = []
        for n in 0..<5 {
            before.append(try create(running.store, "before-\(n)", data: 100, outcomes))
            loop.run()
        }
        // One batch of several pages, its first record larger than a page: it is being written when
        // the power goes.
        var torn = [try create(running.store, "torn-big", data: 6000, outcomes)]
        for n in 0..<20 { torn.append(try create(running.store, "torn-\(n)", data: 300, outcomes)) }
        loop.run()
        if followed {
            _ = try create(running.store, "after", data: 100, outcomes)
            loop.run()
        }
        #expect(try await outcomes.wait(for: followed ? 27 : 26).allSatisfy { (try? $0.get()) != nil })
        await running.close()

        let segment = WALDirectory(stateDirectory: directory.path).segmentPath(1)
        var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: segment)))
        let scan = WALScanner.scan(bytes, sequence: 1, isLast: true)
        #expect(scan.count == (followed ? 27 : 26))
        let start = scan.offsets[5] - WALBatchHeader.size
        // Six batches: five of one record, then the 21 records.
        #expect(WALBatchHeader(bytes, at: start)?.firstLSN == 6, "\(scan.offsets)")
        #expect(scan.offsets[25] - start > 3 * WALBatchRecoveryTests.page, "\(scan.offsets)")
        for index in WALBatchRecoveryTests.losses[lost]!(start, bytes.count) { bytes[index] = 0 }
        try Data(bytes).write(to: URL(fileURLWithPath: segment))

        if followed {
            // The batch after it was written once the damaged one's sync returned: damage, not a tear.
            do {
                _ = try openStore(directory.path, now: now)
                Issue.record("damage before a later batch was cut as torn")
            } catch {
                #expect(error.isCorruption && error.message.contains("\(segment) is corrupt at offset \(start):"), "\(error)")
            }
            return
        }
        var reopened = try RunningStore(directory, now: now)
        #expect(reopened.report.warnings.count == 1 && reopened.report.warnings[0].contains("torn write at offset \(start)"),
            "\(reopened.report.warnings)")
        #expect(before.allSatisfy { reopened.store.session(token: $0, now: now) != nil })
        #expect(torn.allSatisfy { reopened.store.session(token: $0, now: now) == nil })
        let (later, _) = try await durably { [reopened, now] done throws(StoreError) in
            try reopened.store.createSession(for: Principal(issuer: "local", sub: "later"), now: now, ttl: 3600, idle: 3600, data: nil, completion: done)
        }
        await reopened.close()
        reopened = try RunningStore(directory, now: now)
        #expect(reopened.report.warnings.isEmpty)
        #expect(reopened.store.statistics.sessions == 6)
        #expect(reopened.store.session(token: later, now: now) != nil)
        await reopened.close()
    }
}
