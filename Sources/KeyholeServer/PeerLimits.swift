import NIOCore

/// What each uid may hold and use: connections open at once, and requests per second (a token bucket,
/// off unless configured). One table for the whole server, since a uid's connections may sit on
/// different event loops; the server keeps it under a lock (`ServerCore.peers`).
///
/// A state machine: the caller passes the time and the limits, and acts on what it returns.
struct PeerLimits {
    private struct Entry {
        var connections = 0
        var bucket: TokenBucket?
    }

    private var entries: [UInt32: Entry] = [:]
    /// When uids with no connection left are next looked at, to forget those whose buckets have
    /// filled up since.
    private var nextSweep: NIODeadline?

    /// Counts a new connection of `uid`; `false` (and nothing counted) when it has its limit already.
    mutating func openConnection(uid: UInt32, limit: Int) -> Bool {
        var entry = entries[uid, default: Entry()]
        guard entry.connections < limit else { return false }
        entry.connections += 1
        entries[uid] = entry
        return true
    }

    /// Gives back a connection counted by `openConnection`. A uid with none left keeps its bucket
    /// until it would be full again (`rate` and `burst` as now configured), so that closing and
    /// opening connections cannot refill it; then it is forgotten, as after a quiet spell. Such uids
    /// are looked at here, once a second at most (whichever uid's connection closes): the table
    /// holds uids with connections and at most every uid that has had one, which the kernel's users
    /// bound, never more entries than those.
    mutating func closeConnection(uid: UInt32, now: NIODeadline, rate: Double, burst: Double) {
        if var entry = entries[uid] {
            entry.connections -= 1
            entries[uid] = entry.connections > 0 || !Self.isRested(entry, now: now, rate: rate, burst: burst) ? entry : nil
        }
        guard now >= nextSweep ?? now else { return }
        nextSweep = now + .seconds(1)
        entries = entries.filter { !Self.isRested($0.value, now: now, rate: rate, burst: burst) }
    }

    /// Whether `entry` holds nothing worth keeping: no connection, and no bucket that is not full.
    private static func isRested(_ entry: Entry, now: NIODeadline, rate: Double, burst: Double) -> Bool {
        entry.connections <= 0 && (entry.bucket?.isFull(now: now, rate: rate, capacity: burst) ?? true)
    }

    /// Takes one request from `uid`'s bucket, which holds `burst` requests and refills at `rate` per
    /// second: `nil` when it may go ahead, else how long until it may.
    mutating func takeRequest(uid: UInt32, now: NIODeadline, rate: Double, burst: Double) -> TimeAmount? {
        // Every connection whose uid is known was counted, so its entry exists.
        guard rate > 0, var entry = entries[uid] else { return nil }
        var bucket = entry.bucket ?? TokenBucket(tokens: burst, at: now)
        let wait = bucket.take(now: now, rate: rate, capacity: burst)
        entry.bucket = bucket
        entries[uid] = entry
        return wait
    }

    /// Connections open for `uid`.
    func connections(of uid: UInt32) -> Int { entries[uid]?.connections ?? 0 }

    /// How many uids the table holds (those with connections, and those whose buckets are refilling).
    var uids: Int { entries.count }
}

/// A token bucket: `capacity` tokens at most, refilled at `rate` per second; a request takes one.
struct TokenBucket: Equatable {
    private(set) var tokens: Double
    private(set) var refilledAt: NIODeadline

    init(tokens: Double, at now: NIODeadline) {
        self.tokens = tokens
        self.refilledAt = now
    }

    /// Whether the bucket holds `capacity` tokens at `now` (always, without a rate: nothing is limited).
    func isFull(now: NIODeadline, rate: Double, capacity: Double) -> Bool {
        guard rate > 0 else { return true }
        let seconds = now > refilledAt ? Double((now - refilledAt).nanoseconds) / 1e9 : 0
        return tokens + seconds * rate >= capacity
    }

    /// Takes a token: `nil` when there was one, else how long until there is one (nothing taken).
    mutating func take(now: NIODeadline, rate: Double, capacity: Double) -> TimeAmount? {
        if now > refilledAt {
            let seconds = Double((now - refilledAt).nanoseconds) / 1e9
            tokens = min(capacity, tokens + seconds * rate)
            refilledAt = now
        }
        if tokens >= 1 {
            tokens -= 1
            return nil
        }
        let missing = (1 - tokens) / rate
        return .nanoseconds(Int64((missing * 1e9).rounded(.up)))
    }
}
