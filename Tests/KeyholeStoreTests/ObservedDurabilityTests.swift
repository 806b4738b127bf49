import Foundation
import NIOCore
import KeyholeTestSupport
import Testing

@testable import KeyholeStore

/// A change is applied to the tables before its sync: an answer that sees it (a read, or a change with
/// nothing to write) must wait until it is durable, or a crash could take back what it told.
@Suite("Answers that see changes not yet durable")
struct ObservedDurabilityTests {
    typealias Outcomes = InlineCommitTests.Outcomes
    let now: Int64 = 1_780_000_000
    let principal = Principal(issuer: "local", sub: "seen")

    /// A store whose commits are all the committer thread's, a durable session in it, and the held
    /// sync armed for the next batch.
    func start(_ directory: TemporaryStateDirectory, held: HeldSync) async throws -> (RunningStore, token: String, id: SessionID) {
        var configuration = Store.Configuration()
        configuration.syncData = held.syncData
        let running = try RunningStore(directory, configuration: configuration, now: now)
        try await committerIdle(running.store)
        let made = Outcomes()
        let created = try running.store.createSession(for: principal, now: now, ttl: 3600, idle: 3600, data: nil, completion: made.completion)
        #expect(try await made.wait(for: 1).allSatisfy { (try? $0.get()) != nil })
        return (running, created.token, created.session.id)
    }

    /// A revokes the session, its sync held; then B revokes it too (nothing live: nothing to write)
    /// and reads it. None of the three is answered yet.
    func revokeWhileHeld(
        _ running: RunningStore, held: HeldSync, token: String, id: SessionID
    ) async throws -> (first: Outcomes, second: Outcomes, read: Outcomes) {
        held.arm()
        let first = Outcomes()
        #expect(try running.store.revokeSession(id: id, now: now, completion: first.completion) == true)
        await held.entry()
        let second = Outcomes()
        #expect(try running.store.revokeSession(id: id, now: now, completion: second.completion) == false)
        let read = Outcomes()
        #expect(running.store.observing({ running.store.session(token: token, now: now) }, completion: read.completion) == nil)
        #expect(first.all.isEmpty && second.all.isEmpty && read.all.isEmpty)
        return (first, second, read)
    }

    @Test("with nothing on its way to the disk, a read is answered at once")
    func atOnce() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let (running, token, _) = try await start(directory, held: HeldSync())
        let outcomes = Outcomes()
        let found = running.store.observing({ running.store.session(token: token, now: now) }, completion: outcomes.completion)
        #expect(found != nil)
        // Completed before observing returned.
        #expect(outcomes.all.count == 1)
        await running.close()
    }

    @Test("a revoke of a session another revoke has just taken, and a read of it, are answered only once that revoke is durable",
        .timeLimit(.minutes(1)))
    func waitForTheSync() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let held = HeldSync()
        let (running, token, id) = try await start(directory, held: held)
        let (first, second, read) = try await revokeWhileHeld(running, held: held, token: token, id: id)

        held.release(succeeding: true)
        for outcomes in [first, second, read] {
            let results = try await outcomes.wait(for: 1)
            #expect(results.count == 1 && (try? results[0].get()) != nil)
        }
        await running.close()
    }

    @Test("session.get's read-and-write in one hold waits as a read does: nothing found yet, its answer only once the revoke is durable",
        .timeLimit(.minutes(1)))
    func writeSessionWaits() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let held = HeldSync()
        let (running, token, id) = try await start(directory, held: held)
        let (first, _, _) = try await revokeWhileHeld(running, held: held, token: token, id: id)
        let read = Outcomes()
        var waiters = 0
        var buffer = ByteBuffer()
        let (found, waits) = Array(token.utf8).withUnsafeBytes {
            running.store.writeSession(token: $0, now: now, into: &buffer) {
                waiters += 1
                return read.completion
            }
        }
        #expect(!found && buffer.readableBytes == 0)
        #expect(waits && waiters == 1)
        #expect(read.all.isEmpty && first.all.isEmpty)
        held.release(succeeding: true)
        let results = try await read.wait(for: 1)
        #expect(results.count == 1 && (try? results[0].get()) != nil)
        await running.close()
    }

    @Test("when that sync fails, what saw the revoke fails too (storage unavailable), and the session is live, in memory and after a restart",
        .timeLimit(.minutes(1)))
    func failedSync() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let held = HeldSync()
        var (running, token, id) = try await start(directory, held: held)
        let (first, second, read) = try await revokeWhileHeld(running, held: held, token: token, id: id)

        held.release(succeeding: false)
        for outcomes in [first, second, read] {
            let results = try await outcomes.wait(for: 1)
            guard case .failure(let error)? = results.first else {
                Issue.record("an answer that saw an undone revoke succeeded")
                continue
            }
            #expect(error.isUnavailable, "\(error)")
        }
        #expect(running.store.session(token: token, now: now) != nil)
        await running.close()
        running = try RunningStore(directory, now: now)
        #expect(running.store.session(token: token, now: now) != nil)
        await running.close()
    }
}
