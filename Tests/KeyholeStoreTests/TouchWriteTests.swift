import Foundation
import Synchronization
import Testing

@testable import KeyholeStore

/// Touches (a session's last use, logged at most once a minute) wake nobody: they go to disk with the
/// next change's commit, or with the committer's own pass within `quietWriteDelay`.
@Suite("Touches written without a wake-up of their own")
struct TouchWriteTests {
    let now: Int64 = 1_800_000_000
    static let alice = Principal(issuer: "local", sub: "alice")

    @Test("a touch waits for the next change, which carries it in its own sync; both survive a restart")
    func carriedByTheNextChange() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var configuration = Store.Configuration()
        configuration.quietWriteDelay = .seconds(3600)
        let running = try RunningStore(directory, configuration: configuration, now: now)
        let (token, _) = try await durably { done throws(StoreError) in
            try running.store.createSession(for: Self.alice, now: now, ttl: 86_400, idle: 3600, data: nil, completion: done)
        }
        try await committerIdle(running.store)
        let before = running.store.statistics
        // A minute later: the read logs a touch, and nobody is woken to write it.
        #expect(running.store.session(token: token, now: now + 61) != nil)
        #expect(running.store.state.withLock { $0.pendingCount } == 1)
        #expect(running.store.statistics.records == before.records)
        // The next change's commit writes both with one sync.
        _ = try await durably { done throws(StoreError) in
            try running.store.createSession(for: Self.alice, now: now + 62, ttl: 86_400, idle: 3600, data: nil, completion: done)
        }
        let after = running.store.statistics
        #expect(after.records == before.records + 2)
        #expect(after.syncs == before.syncs + 1)
        await running.close()

        // The touch came back from the log (a read now would touch again, so list instead).
        let reopened = try RunningStore(directory, now: now + 62)
        #expect(reopened.store.sessions(of: Self.alice, now: now + 62).map(\.lastSeenAt).sorted() == [now + 61, now + 62])
        await reopened.close()
    }

    @Test("with no change to carry it, the committer writes a touch within quietWriteDelay")
    func writtenByTheCommitter() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var configuration = Store.Configuration()
        configuration.quietWriteDelay = .milliseconds(50)
        let running = try RunningStore(directory, configuration: configuration, now: now)
        let (token, _) = try await durably { done throws(StoreError) in
            try running.store.createSession(for: Self.alice, now: now, ttl: 86_400, idle: 3600, data: nil, completion: done)
        }
        let before = running.store.statistics.records
        #expect(running.store.session(token: token, now: now + 61) != nil)
        try await eventually { running.store.statistics.records != before }
        #expect(running.store.statistics.records == before + 1)
        #expect(running.store.state.withLock { $0.pendingCount } == 0)
        await running.close()
    }
}
