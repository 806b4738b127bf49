import Logging
import ServiceLifecycle

/// Takes a snapshot whenever the log grows past its threshold (`Store.Configuration.snapshotWALBytes`,
/// or `snapshotWALPercent` of the last snapshot's size; the committer signals it), so that start-up
/// replays a bounded log and the log's old segments can go. Put it after the
/// `StoreCommitter` in the group: on shutdown it stops first, abandoning a snapshot in progress.
public struct StoreSnapshotter: Service {
    /// How it retries.
    public struct Configuration: Sendable {
        /// After a failed snapshot, the next try waits this long.
        public var retryInterval: Duration = .seconds(30)

        /// The defaults.
        public init() {}
    }

    private let store: Store
    private let configuration: Configuration
    private let now: @Sendable () -> Int64
    private let logger: Logger

    /// A snapshotter for `store`, with `now` the wall clock in seconds.
    public init(store: Store, configuration: Configuration = Configuration(), now: @escaping @Sendable () -> Int64, logger: Logger) {
        self.store = store
        self.configuration = configuration
        self.now = now
        self.logger = logger
    }

    /// Waits for signals until graceful shutdown; a log already past the limit at start-up gets a
    /// snapshot at once.
    public func run() async {
        await withGracefulShutdownHandler {
            if store.snapshotDue { await snapshot() }
            for await _ in store.snapshotSignals {
                if Task.isCancelled { break }
                if store.snapshotDue { await snapshot() }
                store.snapshotSignalHandled()
            }
        } onGracefulShutdown: {
            store.abortSnapshots()
        }
    }

    private func snapshot() async {
        let trigger: Logger.MetadataValue = store.resyncDue ? "failed_sync" : "wal_bytes"
        do throws(StoreError) {
            // Due no longer once an `admin.snapshot` under way has ended: nothing to write again.
            guard let report = try await store.snapshotIfDue(now: now()) else { return }
            logger.info("storage.snapshot", metadata: report.metadata.merging(["trigger": trigger]) { $1 })
        } catch {
            logger.error("storage.snapshot_failed", metadata: ["error": "\(error.message)", "trigger": trigger])
            // Abandoned at shutdown, or a failure to wait out (the signal stays set meanwhile).
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: configuration.retryInterval) }
        }
    }
}

extension SnapshotReport {
    /// The figures, for the log.
    public var metadata: Logger.Metadata {
        [
            "start_lsn": "\(startLSN)", "sessions": "\(sessions)", "users": "\(users)", "bytes": "\(bytes)",
            "wal_bytes_removed": "\(walBytesRemoved)", "ms": "\(milliseconds)",
            "longest_pause_us": "\(longestPauseMicroseconds)",
        ]
    }
}
