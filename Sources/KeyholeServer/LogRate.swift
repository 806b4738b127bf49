import NIOCore

/// How many lines per second each connection-level event may put in the log. A hostile local
/// client can open thousands of connections a second, each with a bad frame or a denied request;
/// logged one line each, that would flood the journal and cost keyholed more than the attack itself.
/// Past the rate an event is logged at debug only, and the next line that gets through says how many
/// were held back (`suppressed`).
///
/// A state machine: the caller passes the time and logs as told.
package struct LogRate {
    /// Lines per second, per event, once the burst is spent.
    package var linesPerSecond = 10.0
    /// Lines an event may log at once after a quiet spell.
    package var burst = 20.0

    private struct Entry {
        var bucket: TokenBucket
        var suppressed = 0
    }

    private var entries: [String: Entry] = [:]

    /// Ten lines a second per event, twenty at once.
    package init() {}

    /// Whether a line of `event` goes to the log at its level now: `nil` when it is held back (and
    /// counted), else how many were held back since the last line that went.
    package mutating func admit(_ event: String, now: NIODeadline) -> Int? {
        var entry = entries[event] ?? Entry(bucket: TokenBucket(tokens: burst, at: now))
        let admitted = entry.bucket.take(now: now, rate: linesPerSecond, capacity: burst) == nil
        let heldBack = entry.suppressed
        entry.suppressed = admitted ? 0 : heldBack + 1
        entries[event] = entry
        return admitted ? heldBack : nil
    }
}
