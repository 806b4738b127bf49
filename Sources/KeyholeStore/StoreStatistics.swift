/// The store's figures for `stats`.
public struct StoreStatistics: Sendable, Equatable {
    /// Sessions in memory (expired ones not yet swept included).
    public var sessions: Int
    /// User records.
    public var users: Int
    /// Bytes of log on disk: what start-up would replay after the last snapshot.
    public var walBytes: Int
    /// The log's size at which the next snapshot is taken (`nil`: only when asked for).
    public var snapshotAtWALBytes: Int?
    /// Records written since start-up.
    public var records: Int
    /// fdatasync calls that made records durable.
    public var syncs: Int
    /// Records made durable by those syncs, on average per sync (group commit at work).
    public var recordsPerSync: Double
    /// Of `syncs`, those an event loop made for its own changes (`Store.commitInline(using:)`).
    public var inlineSyncs: Int
    /// Times a slow inline sync sent commits back to the committer thread for a while.
    public var inlinePauses: Int
    /// Why writes are refused, while they are.
    public var failure: String?
    /// How many times storage has failed since start-up.
    public var failures: Int
    /// Snapshots taken since start-up, and the last one.
    public var snapshots: Int
    public var lastSnapshot: SnapshotReport?
    /// Outbox entries: work owed outside, not yet done.
    public var outbox: Int
}

extension Store {
    /// The current figures.
    public var statistics: StoreStatistics {
        state.withLock { state in
            let counters = state.counters
            return StoreStatistics(
                sessions: state.tables.sessionCount, users: state.tables.userCount, walBytes: counters.walBytes,
                snapshotAtWALBytes: state.snapshotThreshold(configuration),
                records: counters.records, syncs: counters.syncs,
                recordsPerSync: counters.syncs > 0 ? Double(counters.syncedRecords) / Double(counters.syncs) : 0,
                inlineSyncs: counters.inlineSyncs, inlinePauses: counters.inlinePauses,
                failure: state.failure, failures: counters.failures, snapshots: counters.snapshots,
                lastSnapshot: state.lastSnapshot, outbox: state.tables.outbox.count)
        }
    }
}

extension Store {
    /// How long the log's writer (the committer thread, or an event loop committing inline) has been in
    /// its current step (a write, a sync, a probe of failed storage), or nil while nobody writes. A disk that no longer answers shows here as a figure
    /// that only grows, however busy keyholed is otherwise: the
    /// watchdog withholds its ping past a limit, so that systemd restarts a wedged keyholed.
    public func committerBusy(now: ContinuousClock.Instant = .now) -> Duration? {
        state.withLock { $0.committerBusySince }.map { now - $0 }
    }
}
