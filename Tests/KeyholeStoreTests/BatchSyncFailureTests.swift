import Foundation
import Synchronization
import KeyholeTestSupport
import Testing

@testable import KeyholeStore

/// fsync = "batch" acknowledges a change once written, before fdatasync. When that sync then fails,
/// Linux may have dropped the pages from the disk while the page cache still reads them back, and no
/// later sync writes them again: keyholed writes what it acknowledged again, in a snapshot.
@Suite("A failed sync in batch mode")
struct BatchSyncFailureTests {
    let now: Int64 = 1_780_000_000

    /// Fails the first sync after it is armed as Linux may: the unsynced bytes never reach the disk.
    final class LosingSync: Sendable {
        private let armed = Mutex(false)
        private let fired = Mutex(false)

        func arm() { armed.withLock { $0 = true } }
        var hasFired: Bool { fired.withLock { $0 } }

        var syncData: @Sendable (Int32, Range<Int>) -> Bool {
            { fd, unsynced in
                let fire = self.armed.withLock { armed in
                    defer { armed = false }
                    return armed
                }
                guard fire else { return fdatasync(fd) == 0 }
                let zeros = [UInt8](repeating: 0, count: unsynced.count)
                _ = zeros.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(unsynced.lowerBound)) }
                _ = fdatasync(fd)
                self.fired.withLock { $0 = true }
                errno = EIO
                return false
            }
        }
    }

    @Test("changes acknowledged before a failed sync survive a restart: a snapshot writes them again once the disk works",
        .timeLimit(.minutes(1)))
    func resync() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let losingSync = LosingSync()
        var configuration = Store.Configuration()
        configuration.durability = .batch(interval: .milliseconds(2))
        configuration.retryInterval = .milliseconds(10)
        configuration.snapshotWALBytes = nil
        configuration.syncData = losingSync.syncData
        var running = try RunningStore(directory, configuration: configuration, now: now)
        var signals = running.store.snapshotSignals.makeAsyncIterator()

        // Acknowledged changes, until the sync after some of them failed (changes made while the store
        // refuses them are not acknowledged; the probe may also have found the disk working already).
        losingSync.arm()
        var acknowledged: [String] = []
        for n in 0..<100_000 where !losingSync.hasFired {
            do {
                let (token, _) = try await durably { done throws(StoreError) in
                    try running.store.createSession(
                        for: Principal(issuer: "local", sub: "user-\(n)"), now: now, ttl: 86_400, idle: 7200, data: nil, completion: done)
                }
                acknowledged.append(token)
            } catch let error as StoreError {
                #expect(error.isUnavailable, "\(error)")
            }
        }
        #expect(losingSync.hasFired && !acknowledged.isEmpty)
        #expect(running.store.resyncDue)

        // The probe finds the disk working again and asks for the snapshot.
        #expect(await signals.next() != nil)
        #expect(running.store.snapshotDue)
        let report = try await running.store.snapshot(now: now + 1)
        running.store.snapshotSignalHandled()
        #expect(report.sessions == acknowledged.count)
        #expect(!running.store.resyncDue && !running.store.snapshotDue)
        await running.close()

        // The segment the failed sync damaged is gone; every acknowledged session is back.
        running = try RunningStore(directory, now: now + 2)
        #expect(running.report.snapshotLSN == report.startLSN)
        let missing = acknowledged.filter { running.store.session(token: $0, now: now + 2) == nil }
        #expect(missing.isEmpty)
        await running.close()
    }
}

/// The watchdog's measure of a stuck log: how long the committer has been in its current step.
@Suite("The committer's busy time")
struct CommitterBusyTests {
    @Test("young while idle; the age of a sync that does not return; back to a fresh step once it does", .timeLimit(.minutes(1)))
    func stuckSync() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let held = HeldSync()
        var configuration = Store.Configuration()
        configuration.syncData = held.syncData
        let running = try RunningStore(directory, configuration: configuration, now: 1_780_000_000)
        let store = running.store
        // Idle (a step may be just starting: it is young).
        #expect((store.committerBusy() ?? .zero) < .seconds(5))

        held.arm()
        let change = Task {
            try await durably { done throws(StoreError) in
                try store.createSession(for: Principal(issuer: "local", sub: "u"), now: 1_780_000_000, ttl: 3600, idle: 3600, data: nil, completion: done)
            }
        }
        await held.entry()
        let later = ContinuousClock.now + .seconds(100)
        let stuck = try #require(store.committerBusy(now: later))
        #expect(stuck >= .seconds(100))
        held.release(succeeding: true)
        _ = try await change.value
        // The step that held is over: what is measured now (if anything) began after it.
        #expect((store.committerBusy(now: later) ?? .zero) < stuck)
        await running.close()
    }
}
