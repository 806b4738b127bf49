import NIOConcurrencyHelpers
import Synchronization

/// What a snapshot wrote (`admin.snapshot` answers with it).
public struct SnapshotReport: Sendable, Equatable {
    /// Its start LSN: replay after a restart resumes there.
    public var startLSN: UInt64
    /// Entries written.
    public var sessions: Int
    public var users: Int
    /// The file's size.
    public var bytes: Int
    /// Log bytes deleted because the snapshot covers them.
    public var walBytesRemoved: Int
    /// When it was taken (the store's clock), and how long it took.
    public var createdAt: Int64
    public var milliseconds: Int
    /// The longest time one chunk held the store's lock (requests wait that long at most).
    public var longestPauseMicroseconds: Int
}

extension Store {
    /// Takes a snapshot (SNAPSHOT.md, "Taking one without stopping requests") on a thread of its own,
    /// then deletes the log and the snapshots it makes redundant. One snapshot runs at a time: a
    /// second call waits, then takes a new one.
    ///
    /// - Throws: `StoreError.unavailable` while storage fails or the store stops (then nothing is
    ///   kept), `.io` when the snapshot cannot be written.
    public func snapshot(now: Int64) async throws(StoreError) -> SnapshotReport {
        try await onSnapshotThread { [self] () throws(StoreError) in try writeSnapshot(now: now) }
    }

    /// Whether a snapshot is wanted: the log has grown past its threshold (`snapshotThreshold`), or a
    /// failed sync left acknowledged changes to write again.
    public var snapshotDue: Bool {
        state.withLock { $0.snapshotWanted(configuration) }
    }

    /// The log's size on disk at which the next snapshot is taken (`nil`: only when asked for).
    public var snapshotThreshold: Int? { state.withLock { $0.snapshotThreshold(configuration) } }

    /// Whether a failed sync (batch durability) left acknowledged changes to write again.
    var resyncDue: Bool { state.withLock { $0.resyncDue } }

    /// The snapshotter has dealt with a signal: the next write past the limit signals again.
    func snapshotSignalHandled() {
        let again = state.withLock { state in
            state.snapshotSignalled = false
            // A resync still due (its snapshot failed) cannot wait for a write that may never come.
            return state.resyncDue && state.signalSnapshotIfDue(configuration)
        }
        if again { snapshotSignal.yield() }
    }

    /// Stops a snapshot being taken at its next chunk, and refuses new ones (shutdown).
    func abortSnapshots() {
        state.withLock { $0.snapshotAborted = true }
        snapshotSignal.finish()
    }

    /// Takes a snapshot if one is still due once no other is being taken (`nil` otherwise): the
    /// snapshotter's, so that one due while `admin.snapshot` wrote a snapshot is not written again
    /// after it.
    func snapshotIfDue(now: Int64) async throws(StoreError) -> SnapshotReport? {
        try await onSnapshotThread { [self] () throws(StoreError) -> SnapshotReport? in
            snapshotLock.lock()
            defer { snapshotLock.unlock() }
            return snapshotDue ? try writeSnapshotLocked(now: now) : nil
        }
    }

    /// Runs `body` on a thread of its own (a snapshot blocks on the disk and on the committer, which
    /// the cooperative pool must not), and returns what it returned.
    private func onSnapshotThread<Value: Sendable>(
        _ body: @escaping @Sendable () throws(StoreError) -> Value
    ) async throws(StoreError) -> Value {
        let result = await withCheckedContinuation { (continuation: CheckedContinuation<Result<Value, StoreError>, Never>) in
            StoreThread.start(name: "keyhole-snap") { continuation.resume(returning: Result(catching: body)) }
        }
        return try result.get()
    }

    /// Blocks the calling thread, which must not be one of the cooperative pool's.
    func writeSnapshot(now: Int64) throws(StoreError) -> SnapshotReport {
        snapshotLock.lock()
        defer { snapshotLock.unlock() }
        return try writeSnapshotLocked(now: now)
    }

    /// `writeSnapshot` with `snapshotLock` held.
    private func writeSnapshotLocked(now: Int64) throws(StoreError) -> SnapshotReport {
        let started = ContinuousClock.now
        // The snapshot's writes and fsync slow the log's syncs (up to tens of ms seen): meanwhile the
        // committer thread commits, so that event loops do not stall on them (see `commitInline`).
        state.withLock { $0.snapshotWriting = true }
        defer {
            state.withLock { state in
                state.snapshotWriting = false
                state.inlineSyncAverage = 0
            }
        }

        // 1. A new segment: its first LSN is where replay will resume.
        let cutDone = BlockingResult<(sequence: UInt64, firstLSN: UInt64)>()
        let (failures, ring) = try state.withLock { state throws(StoreError) -> (Int, Bool) in
            try state.checkSnapshotAllowed()
            state.cutWaiters.append { cutDone.set($0) }
            defer { state.committerWaiting = false }
            return (state.counters.failures, state.committerWaiting)
        }
        if ring { ringDoorbell() }
        let cut = try cutDone.wait()
        try snapshots.create()
        let writer = try SnapshotWriter(directory: snapshots, startLSN: cut.firstLSN)

        // 2. The outbox, then the tables, a chunk per hold of the lock.
        var bytes: [UInt8] = []
        var cursor = 0
        var longestPause = Duration.zero
        var outboxIndex = writer.nextIndex
        let outbox = try state.withLock { state throws(StoreError) in
            try state.checkSnapshotAllowed()
            return state.tables.appendOutbox(index: &outboxIndex, to: &bytes)
        }
        try writer.write(bytes, outbox)
        repeat {
            bytes.removeAll(keepingCapacity: true)
            var index = writer.nextIndex
            let (next, count) = try state.withLock { state throws(StoreError) in
                try state.checkSnapshotAllowed()
                let start = ContinuousClock.now
                defer { longestPause = max(longestPause, ContinuousClock.now - start) }
                return state.tables.appendEntries(from: cursor, limit: configuration.snapshotChunk, index: &index, to: &bytes)
            }
            try writer.write(bytes, count)
            cursor = next
        } while cursor != 0

        // 3. Everything the chunks saw is in the log, and none of it was taken back.
        let barrier = BlockingResult<Void>()
        try change({ barrier.set($0) }) { _, _ in ((), [StoreRecord.noop]) }
        try barrier.wait()
        guard state.withLock({ $0.counters.failures }) == failures else {
            throw .unavailable("storage failed while the snapshot was taken")
        }

        // 4. Durable under its name; then what it makes redundant goes.
        let size = try writer.finish(createdAt: now)
        // The next start-up loads this one, whatever happens to the rest: the threshold follows it now.
        state.withLock { $0.snapshotBytes = size }
        try snapshots.removeSnapshots(before: cut.firstLSN)
        let removed = try walDirectory.removeSegments(before: cut.sequence)
        let report = SnapshotReport(
            startLSN: cut.firstLSN, sessions: Int(writer.sessions), users: writer.users, bytes: size,
            walBytesRemoved: removed, createdAt: now, milliseconds: Self.microseconds(ContinuousClock.now - started) / 1000,
            longestPauseMicroseconds: Self.microseconds(longestPause))
        StoreMetrics.record(StoreMetrics.snapshotDuration, since: started)
        state.withLock { state in
            state.counters.walBytes = max(0, state.counters.walBytes - removed)
            state.counters.snapshots += 1
            state.lastSnapshot = report
            // Everything acknowledged before the cut is on disk now, unless a sync failed since.
            if state.counters.failures == failures { state.resyncDue = false }
        }
        return report
    }
}

extension Store {
    static func microseconds(_ duration: Duration) -> Int {
        Int(duration.components.seconds) * 1_000_000 + Int(duration.components.attoseconds / 1_000_000_000_000)
    }
}

extension Store.State {
    func checkSnapshotAllowed() throws(StoreError) {
        if let failure { throw .unavailable("storage is failing: \(failure)") }
        if stopping || snapshotAborted { throw .unavailable("the store is stopping") }
    }

    /// The log's size at which a snapshot is due: `snapshotWALBytes`, or `snapshotWALPercent` of the
    /// newest snapshot's size when that is more (`nil`: only when asked for).
    func snapshotThreshold(_ configuration: Store.Configuration) -> Int? {
        guard let floor = configuration.snapshotWALBytes else { return nil }
        let (scaled, overflow) = snapshotBytes.multipliedReportingOverflow(by: max(0, configuration.snapshotWALPercent))
        return overflow ? .max : max(floor, scaled / 100)
    }

    /// Whether a snapshot is wanted: the log grew past its threshold, or a failed sync left changes to
    /// write again.
    func snapshotWanted(_ configuration: Store.Configuration) -> Bool {
        resyncDue || (snapshotThreshold(configuration).map { counters.walBytes >= $0 } ?? false)
    }

    /// Whether a snapshot is wanted and the snapshotter must be told (once, and again after a
    /// snapshot that failed).
    mutating func signalSnapshotIfDue(_ configuration: Store.Configuration) -> Bool {
        guard snapshotWanted(configuration), !snapshotSignalled else { return false }
        snapshotSignalled = true
        return true
    }
}

/// A result handed from one thread to another that blocks until it arrives.
final class BlockingResult<Value: Sendable>: Sendable {
    private let condition = ConditionLock<Int>(value: 0)
    private let result = Mutex<Result<Value, StoreError>?>(nil)

    func set(_ value: Result<Value, StoreError>) {
        result.withLock { $0 = value }
        condition.lock()
        condition.unlock(withValue: 1)
    }

    func wait() throws(StoreError) -> Value {
        condition.lock(whenValue: 1)
        condition.unlock()
        // Set before the condition turned 1.
        return try result.withLock { $0! }.get()
    }
}
