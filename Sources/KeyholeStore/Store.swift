import KeyholeProtocol
import Logging
import NIOConcurrencyHelpers
import Synchronization

/// keyholed's users and sessions: tables in memory, every change logged to the WAL before it is
/// acknowledged.
///
/// Reads take the lock, look up and return: no I/O. A change is applied in memory and its record
/// queued under the lock; the committer thread (or, with `commitInline(using:)`, the event loop that
/// made the change, after its pass) writes what has queued as one batch, makes it durable (with
/// `durability = .always`) and then calls each change's completion. Changes that queue while a
/// sync runs go into the next sync together (group commit). When a write or sync fails, every change
/// not yet durable is taken back in memory and fails with `StoreError.unavailable`; until a probe write
/// succeeds, changes are refused at once while reads go on.
public final class Store: Sendable {
    /// How the store writes.
    public struct Configuration: Sendable {
        /// When a change counts as done.
        public enum Durability: Sendable, Equatable {
            /// After fdatasync: survives power loss.
            case always
            /// After write(2), with an fdatasync every `interval`: survives a crash of keyholed, and
            /// loses at most about `interval` of changes on power loss.
            case batch(interval: Duration)
            /// After write(2); syncing is left to the kernel.
            case off
        }

        /// When a change counts as done; `.always` by default.
        public var durability = Durability.always
        /// Where the log's segments are cut.
        public var segmentBytes = 64 << 20
        /// A session's last use is logged at most this often (seconds).
        public var touchInterval: Int64 = 60
        /// Touches (records nobody waits for) go to disk with the next change's commit, or with the
        /// committer's own pass at most this long after they queue: a read is not worth a wake-up, a
        /// write and a sync of its own, and a touch lost in a crash only makes a session look idle
        /// a little sooner.
        public var quietWriteDelay: Duration = .seconds(1)
        /// While storage fails, a probe write is tried this often.
        public var retryInterval: Duration = .seconds(1)
        /// A snapshot is taken when the log on disk reaches this size (`nil`: only when asked for), or
        /// `snapshotWALPercent` of the newest snapshot's, whichever is more.
        public var snapshotWALBytes: Int? = 64 << 20
        /// A snapshot is due only once the log reaches this percentage of the newest snapshot's size,
        /// when that is more than `snapshotWALBytes` (as Redis's auto-aof-rewrite-percentage): a store of
        /// millions is then rewritten in proportion to how much it changed, not every
        /// `snapshotWALBytes` of log. `0`: `snapshotWALBytes` alone.
        public var snapshotWALPercent = 100
        /// Entries (sessions and principals) copied out per hold of the lock while a snapshot is taken;
        /// a principal's sessions always go together.
        public var snapshotChunk = 1024
        /// How the log makes its segments durable (see `WALWriter.Configuration.syncData`): a failpoint
        /// for tests.
        public var syncData = WALWriter.Configuration().syncData
        /// How the store makes a directory's entries durable (`WALDirectory.fsyncDirectory`): a failpoint
        /// for tests, as `syncData` is.
        public var syncDirectory = WALDirectory.fsyncDirectory
        /// With `durability = .always` and an inline scheduler set (`commitInline(using:)`): when writes
        /// and syncs on the changing thread take longer than this on average (a moving average over
        /// about the last eight), commits go back to the committer thread for `inlinePause`, so that a
        /// slow disk does not hold up that thread's other work (reads) on every commit. `nil`: never
        /// commit inline.
        public var inlineSyncLimit: Duration? = .milliseconds(2)
        /// How long commits stay on the committer thread after a slow inline sync.
        public var inlinePause: Duration = .seconds(10)

        /// The defaults.
        public init() {}
    }

    /// A queue of records holding none yet: room for a batch header (WAL.md, "Batches").
    static let emptyBatch = [UInt8](repeating: 0, count: WALBatchHeader.size)

    /// A change's completion: called once, with success when the change is as durable as configured.
    public typealias Completion = @Sendable (Result<Void, StoreError>) -> Void

    /// Runs a commit on the calling thread's event loop after the work it is doing now (the rest of
    /// its I/O pass), returning true; false when the calling thread has no such loop. A commit it took
    /// must run exactly once: until it has, no other is scheduled and the changes wait for it.
    public typealias InlineScheduler = @Sendable (_ commit: @escaping @Sendable () -> Void) -> Bool

    struct State {
        var tables = StoreTables()
        /// The LSN the next record gets.
        var nextLSN: UInt64
        /// Encoded records not yet handed to the committer, after room for their batch's header (which
        /// the writer fills in: the batch goes to the log as it is, with no copy), their undo entries
        /// and completions.
        var pending = Store.emptyBatch
        var pendingCount = 0
        var pendingUndo: [StoreTables.Undo] = []
        var pendingWaiters: [Completion] = []
        /// Why writes are refused, while they are.
        var failure: String?
        var failedAt: Int64?
        var committerWaiting = false
        /// While storage fails, when the committer next probes it.
        var probeDue = ContinuousClock.now
        /// Set by `commitInline(using:)`.
        var inlineScheduler: InlineScheduler?
        /// An inline commit is scheduled and will take what is queued.
        var inlineScheduled = false
        /// After slow inline syncs: commits go to the committer thread until then.
        var inlinePausedUntil: ContinuousClock.Instant?
        /// How long inline writes and syncs took lately (seconds, a moving average).
        var inlineSyncAverage = 0.0
        /// A snapshot is being written: commits go to the committer thread meanwhile.
        var snapshotWriting = false
        /// The committer's logger (set when it starts), for what an inline commit reports.
        var logger: Logger?
        /// When the current writer's step began (the committer's, or an inline commit's: both set it
        /// under `writerLock`); nil while nobody writes.
        var committerBusySince: ContinuousClock.Instant?
        var stopping = false
        var counters = Counters()
        /// Snapshots waiting for the committer to start a new segment.
        var cutWaiters: [@Sendable (Result<(sequence: UInt64, firstLSN: UInt64), StoreError>) -> Void] = []
        /// Whether the snapshotter was told the log is due for a snapshot and has not finished since.
        var snapshotSignalled = false
        /// A sync failed after its changes were acknowledged (batch durability): they may not be on
        /// disk, whatever the page cache says, so a snapshot must write them again.
        var resyncDue = false
        /// Set on shutdown: a snapshot being taken stops at its next chunk.
        var snapshotAborted = false
        var lastSnapshot: SnapshotReport?
        /// The newest snapshot's size on disk (0: there is none), which `snapshotWALPercent` scales.
        var snapshotBytes = 0
        /// The LSN of the last record of the last change applied to the tables that someone waits for
        /// (touches, which nobody waits for, do not count).
        var lastChangeLSN: UInt64
        /// The highest LSN of a batch whose changes are as durable as configured (their completions
        /// ran, or run now).
        var durableLSN: UInt64
        /// Answers based on tables holding changes not yet durable (`observe`): each runs once the
        /// log is durable up to its LSN, ascending by LSN.
        var observers: [(lsn: UInt64, completion: Completion)] = []
        /// Counts failures: a read that saw a failure happen while it read may have seen changes since
        /// taken back.
        var failureEpoch: UInt64 = 0

        init(nextLSN: UInt64) {
            self.nextLSN = nextLSN
            lastChangeLSN = nextLSN - 1
            durableLSN = nextLSN - 1
        }
    }

    /// What the statistics report.
    struct Counters {
        var records = 0
        var syncs = 0
        var syncedRecords = 0
        var walBytes = 0
        var failures = 0
        var snapshots = 0
        var inlineSyncs = 0
        var inlinePauses = 0
    }

    let configuration: Configuration
    let state: Mutex<State>
    /// Rung (set to 1) when work queues while the committer waits.
    let doorbell = ConditionLock<Int>(value: 0)
    /// Used under `writerLock` only (and by `open` before the committer starts).
    nonisolated(unsafe) let writer: WALWriter
    /// Held by whoever writes: the committer thread for each step but its waits, an inline commit for
    /// its batch. A batch is taken from the queue only under it, so batches reach the log in LSN order.
    /// Taken before `state`, never inside it.
    let writerLock = NIOLock()
    /// Where batches are taken to (see `Scratch`); used under `writerLock` only.
    nonisolated(unsafe) var scratch = Scratch()
    let lock: StateDirectoryLock
    let walDirectory: WALDirectory
    let snapshots: SnapshotDirectory
    /// One snapshot at a time.
    let snapshotLock = NIOLock()
    /// Yields when the log has grown past its snapshot threshold (read by the `StoreSnapshotter`).
    let snapshotSignals: AsyncStream<Void>
    let snapshotSignal: AsyncStream<Void>.Continuation

    init(
        configuration: Configuration, tables: StoreTables, writer: WALWriter, lock: StateDirectoryLock,
        walDirectory: WALDirectory, snapshots: SnapshotDirectory, walBytes: Int, snapshotBytes: Int
    ) {
        self.configuration = configuration
        var state = State(nextLSN: writer.nextLSN)
        state.tables = tables
        state.counters.walBytes = walBytes
        state.snapshotBytes = snapshotBytes
        self.state = Mutex(state)
        self.writer = writer
        self.lock = lock
        self.walDirectory = walDirectory
        self.snapshots = snapshots
        (snapshotSignals, snapshotSignal) = AsyncStream.makeStream(bufferingPolicy: .bufferingNewest(1))
    }

    // MARK: Changes

    /// Runs `body` on the tables under the lock and queues the records it returns; `completion` runs
    /// when they are durable, or at once when there are none.
    ///
    /// - Throws: `StoreError.unavailable` while writes are refused (nothing changes then), or what
    ///   `body` throws.
    func change<Result: Sendable>(
        _ completion: @escaping Completion,
        _ body: (inout StoreTables, inout [StoreTables.Undo]?) throws(StoreError) -> (Result, [StoreRecord])
    ) throws(StoreError) -> Result {
        let (result, queued, waking) = try state.withLock { state throws(StoreError) -> (Result, Bool, Wake) in
            if let failure = state.failure { throw .unavailable(failure) }
            if state.stopping { throw .unavailable("the store is stopping") }
            // The body appends its undo entries straight to the queue's (moved out, so appending does
            // not copy); they are cut off again when it throws or changes nothing.
            var undo: [StoreTables.Undo]? = state.pendingUndo
            state.pendingUndo = []
            let mark = undo!.count
            defer { state.pendingUndo = undo! }
            let result: Result
            let records: [StoreRecord]
            do throws(StoreError) {
                (result, records) = try body(&state.tables, &undo)
            } catch {
                undo!.removeSubrange(mark...)
                throw error
            }
            guard !records.isEmpty else {
                undo!.removeSubrange(mark...)
                // Nothing to write, but the body may have read changes not yet durable (a revoke of a
                // session another request has just revoked): answered once they are.
                return (result, state.observe(completion), .nobody)
            }
            state.pendingWaiters.append(completion)
            return (result, true, state.queueChange(records))
        }
        if !queued { completion(.success(())) }
        wake(waking)
        return result
    }

    /// What queueing a change asks for.
    enum Wake {
        case nobody
        case committer
        case inline(InlineScheduler)
    }

    func wake(_ wake: Wake) {
        switch wake {
        case .nobody:
            break
        case .committer:
            ringDoorbell()
        case .inline(let scheduler):
            guard !scheduler({ self.commitInline() }) else { return }
            // Not on an event loop (a task, a test): the committer takes this and whatever joined it.
            state.withLock { $0.inlineScheduled = false }
            ringDoorbell()
        }
    }

    func ringDoorbell() {
        doorbell.lock()
        doorbell.unlock(withValue: 1)
    }
}

extension Store.State {
    /// Queues a change's records (their undo entries and completion are queued already); says who
    /// must be woken to commit them: an inline commit on the changing thread's event loop when one can
    /// be scheduled (one at a time: it takes all that queued by then), else the committer if it waits.
    mutating func queueChange(_ records: [StoreRecord]) -> Store.Wake {
        for record in records { enqueue(record) }
        lastChangeLSN = nextLSN - 1
        if inlineScheduled { return .nobody }
        if let scheduler = inlineScheduler, !snapshotWriting {
            if let until = inlinePausedUntil, ContinuousClock.now < until {
                // Slow disk: the committer thread commits until the pause ends.
            } else {
                inlinePausedUntil = nil
                inlineScheduled = true
                return .inline(scheduler)
            }
        }
        defer { committerWaiting = false }
        return committerWaiting ? .committer : .nobody
    }

    /// Queues records nobody waits for (touches), waking nobody (see `quietWriteDelay`); skipped while
    /// writes are refused.
    mutating func queueQuietly(_ records: [StoreRecord], undo: [StoreTables.Undo]) {
        guard failure == nil, !stopping else { return }
        pendingUndo += undo
        for record in records { enqueue(record) }
    }

    /// Encodes `record` as the record with the next LSN (WAL.md, "Records") onto the pending bytes.
    mutating func enqueue(_ record: StoreRecord) {
        pending.appendFramed(sequence: nextLSN) { record.appendBody(to: &$0) }
        nextLSN += 1
        pendingCount += 1
    }
}
