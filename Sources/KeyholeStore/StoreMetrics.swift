import CoreMetrics

/// How long the disk takes (Sources/KeyholeMetrics/METRICS.md): each batch's write and sync, and
/// each snapshot. Counts and sizes are the store's own statistics, read when metrics are exported.
enum StoreMetrics {
    static let syncDuration = Timer(label: "keyholed_log_sync_duration_seconds")
    static let snapshotDuration = Timer(label: "keyholed_snapshot_duration_seconds")

    /// Records the time since `start` with `timer`.
    static func record(_ timer: Timer, since start: ContinuousClock.Instant) {
        let elapsed = (ContinuousClock.now - start).components
        timer.recordNanoseconds(elapsed.seconds * 1_000_000_000 + elapsed.attoseconds / 1_000_000_000)
    }

    /// Makes the handles now, so that both families are exported from the start.
    static func register() {
        _ = (syncDuration, snapshotDuration)
    }
}
