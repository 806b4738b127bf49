import Foundation
import KeyholeTestSupport
import Testing

@testable import KeyholeStore

/// With `fsync = "always"`, a change is answered only once its record is on disk: the committer calls
/// its completion after fdatasync returned, and fails it when fdatasync failed.
@Suite("A change waits for its fdatasync")
struct CommitSyncTests {
    let now: Int64 = 1_780_000_000

    typealias Outcomes = InlineCommitTests.Outcomes

    @Test("the committer completes a change only after its sync returned; a failed sync fails it as unavailable, and a restart does not have it",
        .timeLimit(.minutes(1)))
    func heldSync() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let held = HeldSync()
        var configuration = Store.Configuration()
        configuration.syncData = held.syncData
        var running = try RunningStore(directory, configuration: configuration, now: now)
        // No inline scheduler: every commit is the committer thread's.
        try await committerIdle(running.store)
        let outcomes = Outcomes()
        let create = { [running, now] (sub: String) throws(StoreError) -> String in
            try running.store.createSession(
                for: Principal(issuer: "local", sub: sub), now: now, ttl: 3600, idle: 3600, data: nil, completion: outcomes.completion
            ).token
        }

        held.arm()
        let kept = try create("kept")
        await held.entry()
        // Written, its sync under way: not answered.
        #expect(outcomes.all.isEmpty)
        held.release(succeeding: true)
        let first = try await outcomes.wait(for: 1)
        #expect(first.count == 1 && (try? first[0].get()) != nil)

        held.arm()
        let lost = try create("lost")
        await held.entry()
        #expect(outcomes.all.count == 1)
        held.release(succeeding: false)
        let second = try await outcomes.wait(for: 2)
        #expect(second.count == 2)
        // Unavailable: what the server answers as storage_unavailable (StoreCommit.protocolError).
        if case .failure(let error) = second[1] {
            #expect(error.isUnavailable, "\(error)")
        } else {
            Issue.record("a change whose sync failed succeeded")
        }
        #expect(running.store.session(token: lost, now: now) == nil)
        #expect(running.store.session(token: kept, now: now) != nil)
        await running.close()

        running = try RunningStore(directory, now: now)
        #expect(running.store.session(token: kept, now: now) != nil)
        #expect(running.store.session(token: lost, now: now) == nil)
        #expect(running.store.statistics.sessions == 1)
        await running.close()
    }
}
