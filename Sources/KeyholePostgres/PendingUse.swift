import KeyholeStore

/// A use of a session this host served and has not written to its row yet (POSTGRES.md, "Reads":
/// `last_seen_at`).
struct PendingUse: Equatable {
    /// The latest use (seconds since 1970).
    var used: Int64
    /// The row's `last_seen_at` as this host knew it when the first of these uses was recorded.
    var rowSeen: Int64
    /// The session's idle timeout.
    var idle: Int64

    /// Whether the use must be written with this heartbeat: the row's idle deadline is within
    /// `margin` of `now` (another host could soon find the session idle by the row), or the use is
    /// `PostgresStore.touchInterval` past the row's (what a host that dies may lose), or it was
    /// that long ago (so that no use waits longer, and the uses pending are at most a touch
    /// interval's worth, whatever the idle timeouts).
    func isDue(now: Int64, margin: Int64) -> Bool {
        let interval = PostgresStore.touchInterval
        return used - rowSeen >= interval || now - used >= interval || rowSeen + idle - now <= margin
    }

    /// This and `other`, uses of the same session: the latest use, and the earliest row seen (so
    /// the write is never later than either asks).
    func merged(_ other: PendingUse) -> PendingUse {
        PendingUse(used: max(used, other.used), rowSeen: min(rowSeen, other.rowSeen), idle: min(idle, other.idle))
    }
}

extension [SessionID: PendingUse] {
    /// Records `use` of session `id`, merged with one recorded already.
    mutating func record(_ use: PendingUse, for id: SessionID) {
        // One hash of the id for a session with a use pending already (a busy one's every later second).
        if let index = index(forKey: id) { values[index] = values[index].merged(use) } else { self[id] = use }
    }
}
