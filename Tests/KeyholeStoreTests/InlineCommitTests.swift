import Foundation
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import KeyholeStore

/// `Store.commitInline(using:)`: changes made on an event loop are written and synced by that loop
/// after its pass, Redis-style, instead of by the committer thread.
@Suite("Commits on the changing thread's event loop")
struct InlineCommitTests {
    let now: Int64 = 1_780_000_000

    /// An event loop's stand-in: it keeps what is scheduled until the test runs it.
    final class HeldCommits: Sendable {
        private let commits = Mutex<[@Sendable () -> Void]>([])
        let accepting: Bool

        init(accepting: Bool = true) { self.accepting = accepting }

        var scheduler: Store.InlineScheduler {
            { commit in
                guard self.accepting else { return false }
                self.commits.withLock { $0.append(commit) }
                return true
            }
        }

        var count: Int { commits.withLock { $0.count } }

        /// Runs (and forgets) what is held, on the calling thread.
        func run() {
            let held = commits.withLock { commits in
                defer { commits = [] }
                return commits
            }
            for commit in held { commit() }
        }
    }

    /// Each completion's result, by arrival.
    final class Outcomes: Sendable {
        private let results = Mutex<[Result<Void, StoreError>]>([])
        var completion: Store.Completion { { result in self.results.withLock { $0.append(result) } } }
        var all: [Result<Void, StoreError>] { results.withLock { $0 } }

        /// Waits (polling, up to 30 s) until `count` have arrived.
        func wait(for count: Int) async throws -> [Result<Void, StoreError>] {
            try await eventually { all.count >= count }
            return all
        }
    }

    final class Tokens: Sendable {
        private let tokens = Mutex<[String]>([])
        func append(_ token: String) { tokens.withLock { $0.append(token) } }
        var all: [String] { tokens.withLock { $0 } }
    }

    final class Flags: Sendable {
        private let flags = Mutex<[Bool]>([])
        func append(_ flag: Bool) { flags.withLock { $0.append(flag) } }
        func clear() { flags.withLock { $0 = [] } }
        var all: [Bool] { flags.withLock { $0 } }
    }

    final class StoreBox: Sendable {
        private let held = Mutex<Store?>(nil)
        var store: Store? {
            get { held.withLock { $0 } }
            set { held.withLock { $0 = newValue } }
        }
    }

    /// The defaults, but for the committer's timed pass (for touches; these tests make none) put off
    /// for an hour: a pass between a change and the test's run of the loop's commit would take the
    /// change itself.
    static func quiet() -> Store.Configuration {
        var configuration = Store.Configuration()
        configuration.quietWriteDelay = .seconds(3600)
        return configuration
    }

    func create(_ store: Store, _ sub: String, _ completion: @escaping Store.Completion) throws -> String {
        try store.createSession(
            for: Principal(issuer: "local", sub: sub), now: now, ttl: 3600, idle: 3600, data: nil, completion: completion
        ).token
    }

    @Test("changes wait for the loop's commit, which syncs them together and answers them on the loop's thread")
    func committedByTheLoop() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        // However slow this machine's syncs, commits stay the loop's: past the default 2 ms a sync, the
        // store hands commits to its committer thread (CI: the third change was never the loop's).
        var configuration = Self.quiet()
        configuration.inlineSyncLimit = .seconds(3600)
        let running = try RunningStore(directory, configuration: configuration, now: now)
        let loop = HeldCommits()
        running.store.commitInline(using: loop.scheduler)
        try await committerIdle(running.store)
        let outcomes = Outcomes()
        let first = try create(running.store, "a", outcomes.completion)
        let second = try create(running.store, "b", outcomes.completion)
        // One commit is scheduled for both, and nothing is answered before it runs.
        #expect(loop.count == 1)
        #expect(outcomes.all.isEmpty)
        loop.run()
        #expect(outcomes.all.count == 2)
        #expect(outcomes.all.allSatisfy { (try? $0.get()) != nil })
        let figures = running.store.statistics
        #expect(figures.syncs == 1)
        #expect(figures.inlineSyncs == 1)
        #expect(figures.recordsPerSync == 2)
        // The next change schedules the next commit.
        _ = try create(running.store, "c", outcomes.completion)
        #expect(loop.count == 1)
        loop.run()
        #expect(outcomes.all.count == 3)
        await running.close()

        let reopened = try RunningStore(directory, now: now)
        #expect(reopened.store.session(token: first, now: now) != nil)
        #expect(reopened.store.session(token: second, now: now) != nil)
        #expect(reopened.store.statistics.sessions == 3)
        await reopened.close()
    }

    @Test("changes made where no loop takes them go to the committer thread")
    func offTheLoop() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let running = try RunningStore(directory, now: now)
        running.store.commitInline(using: HeldCommits(accepting: false).scheduler)
        let outcomes = Outcomes()
        for n in 0..<3 { _ = try create(running.store, "u\(n)", outcomes.completion) }
        let results = try await outcomes.wait(for: 3)
        #expect(results.count == 3)
        #expect(results.allSatisfy { (try? $0.get()) != nil })
        #expect(running.store.statistics.inlineSyncs == 0)
        #expect(running.store.statistics.syncs >= 1)
        await running.close()
    }

    @Test("with fsync other than always, commitInline changes nothing")
    func onlyWhenAlways() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var configuration = Store.Configuration()
        configuration.durability = .off
        let running = try RunningStore(directory, configuration: configuration, now: now)
        let loop = HeldCommits()
        running.store.commitInline(using: loop.scheduler)
        let outcomes = Outcomes()
        _ = try create(running.store, "a", outcomes.completion)
        #expect(try await outcomes.wait(for: 1).count == 1)
        #expect(loop.count == 0)
        await running.close()
    }

    @Test("slow syncs send commits to the committer thread for the pause, then back to the loop")
    func slowSyncsPause() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var configuration = Self.quiet()
        // Every sync is slower than a nanosecond: the first inline commit pauses inline commits.
        configuration.inlineSyncLimit = .nanoseconds(1)
        configuration.inlinePause = .seconds(3600)
        let running = try RunningStore(directory, configuration: configuration, now: now)
        let loop = HeldCommits()
        running.store.commitInline(using: loop.scheduler)
        try await committerIdle(running.store)
        let outcomes = Outcomes()
        _ = try create(running.store, "a", outcomes.completion)
        loop.run()
        #expect(outcomes.all.count == 1)
        #expect(running.store.statistics.inlinePauses == 1)
        // Paused: the committer thread commits, and the loop is not asked.
        _ = try create(running.store, "b", outcomes.completion)
        #expect(loop.count == 0)
        let results = try await outcomes.wait(for: 2)
        #expect(results.count == 2)
        #expect(results.allSatisfy { (try? $0.get()) != nil })
        #expect(running.store.statistics.inlineSyncs == 1)
        // The pause over, the loop commits again.
        running.store.state.withLock { $0.inlinePausedUntil = .now - .seconds(1) }
        try await committerIdle(running.store)
        _ = try create(running.store, "c", outcomes.completion)
        #expect(loop.count == 1)
        loop.run()
        #expect(outcomes.all.count == 3)
        #expect(running.store.statistics.inlineSyncs == 2)
        await running.close()
    }

    @Test("while a snapshot is written, changes go to the committer thread; afterwards to the loop again")
    func duringSnapshots() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        // Each sync of the log records whether a snapshot was being written then.
        let seen = Flags()
        let box = StoreBox()
        var configuration = Self.quiet()
        configuration.syncData = { fd, _ in
            if let store = box.store { seen.append(store.state.withLock { $0.snapshotWriting }) }
            return fdatasync(fd) == 0
        }
        let running = try RunningStore(directory, configuration: configuration, now: now)
        box.store = running.store
        let loop = HeldCommits()
        running.store.commitInline(using: loop.scheduler)
        try await committerIdle(running.store)
        // As writeSnapshot marks it while it runs.
        running.store.state.withLock { $0.snapshotWriting = true }
        let outcomes = Outcomes()
        _ = try create(running.store, "a", outcomes.completion)
        #expect(loop.count == 0)
        #expect(try await outcomes.wait(for: 1).count == 1)
        running.store.state.withLock { $0.snapshotWriting = false }
        // A real snapshot raises the flag while it runs (its barrier record's sync sees it) and lowers
        // it after, with the average of inline syncs reset.
        running.store.state.withLock { $0.inlineSyncAverage = 1 }
        seen.clear()
        _ = try await running.store.snapshot(now: now)
        #expect(seen.all.contains(true))
        #expect(running.store.state.withLock { !$0.snapshotWriting && $0.inlineSyncAverage == 0 })
        try await committerIdle(running.store)
        _ = try create(running.store, "b", outcomes.completion)
        #expect(loop.count == 1)
        loop.run()
        #expect(outcomes.all.count == 2)
        #expect(running.store.statistics.inlineSyncs == 1)
        await running.close()
    }

    @Test("an inline sync that fails fails its changes, refuses more, and the committer brings writes back")
    func failedSync() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let failing = Mutex(false)
        var configuration = Self.quiet()
        configuration.retryInterval = .milliseconds(10)
        configuration.syncData = { fd, _ in
            if failing.withLock({ $0 }) {
                errno = EIO
                return false
            }
            return fdatasync(fd) == 0
        }
        let running = try RunningStore(directory, configuration: configuration, now: now)
        let loop = HeldCommits()
        running.store.commitInline(using: loop.scheduler)
        try await committerIdle(running.store)
        let outcomes = Outcomes()
        let lost = try create(running.store, "a", outcomes.completion)
        failing.withLock { $0 = true }
        loop.run()
        let results = outcomes.all
        #expect(results.count == 1)
        #expect(throws: StoreError.unavailable("")) { try results[0].get() }
        // Taken back in memory, and refused while the disk fails.
        #expect(running.store.session(token: lost, now: now) == nil)
        #expect(throws: StoreError.unavailable("")) { _ = try create(running.store, "b", outcomes.completion) }

        failing.withLock { $0 = false }
        try await eventually { running.store.statistics.failure == nil }
        #expect(running.store.statistics.failure == nil)
        try await committerIdle(running.store)
        let kept = try create(running.store, "c", outcomes.completion)
        #expect(loop.count == 1)
        loop.run()
        #expect(outcomes.all.count == 2)
        #expect((try? outcomes.all.last?.get()) != nil)
        await running.close()

        let reopened = try RunningStore(directory, now: now)
        #expect(reopened.store.session(token: lost, now: now) == nil)
        #expect(reopened.store.session(token: kept, now: now) != nil)
        await reopened.close()
    }

    @Test("real event loops, the committer and snapshots writing at once keep the log in order", .timeLimit(.minutes(2)))
    func concurrentWriters() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var configuration = Store.Configuration()
        configuration.snapshotWALBytes = nil
        let running = try RunningStore(directory, configuration: configuration, now: now)
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        running.store.commitInline { commit in
            guard let loop = MultiThreadedEventLoopGroup.currentEventLoop else { return false }
            loop.execute(commit)
            return true
        }
        let tokens = Tokens()
        let store = running.store
        let now = self.now
        // Two loops create sessions; a task does too (the committer's), while snapshots cut the log.
        let perWriter = 2_000
        try await withThrowingTaskGroup(of: Void.self) { tasks in
            for (index, loop) in [group.next(), group.next()].enumerated() {
                tasks.addTask {
                    try await withThrowingTaskGroup(of: Void.self) { inner in
                        for n in 0..<perWriter {
                            let promise = loop.makePromise(of: Void.self)
                            loop.execute {
                                do {
                                    let token = try store.createSession(
                                        for: Principal(issuer: "local", sub: "loop\(index)-\(n % 50)"), now: now, ttl: 3600,
                                        idle: 3600, data: nil
                                    ) { result in
                                        switch result {
                                        case .success: promise.succeed()
                                        case .failure(let error): promise.fail(error)
                                        }
                                    }.token
                                    tokens.append(token)
                                } catch {
                                    promise.fail(error)
                                }
                            }
                            if n % 64 == 63 { try await promise.futureResult.get() } else {
                                inner.addTask { try await promise.futureResult.get() }
                            }
                        }
                        try await inner.waitForAll()
                    }
                }
            }
            tasks.addTask {
                for n in 0..<500 {
                    let token = try await durably { done throws(StoreError) in
                        try store.createSession(
                            for: Principal(issuer: "local", sub: "task\(n % 10)"), now: now, ttl: 3600, idle: 3600, data: nil,
                            completion: done
                        ).token
                    }
                    tokens.append(token)
                }
            }
            tasks.addTask {
                for _ in 0..<3 { _ = try await store.snapshot(now: now) }
            }
            try await tasks.waitForAll()
        }
        try await group.shutdownGracefully()
        #expect(running.store.statistics.inlineSyncs > 0)
        await running.close()

        let reopened = try RunningStore(directory, now: now)
        // A batch missing or out of order would be corruption, or a torn tail dropped with a warning.
        #expect(reopened.report.warnings.isEmpty)
        let acknowledged = tokens.all
        #expect(acknowledged.count == 2 * perWriter + 500)
        #expect(reopened.store.statistics.sessions == acknowledged.count)
        #expect(acknowledged.allSatisfy { reopened.store.session(token: $0, now: now) != nil })
        await reopened.close()
    }
}
