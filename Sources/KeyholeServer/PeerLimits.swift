import NIOCore

/// What each uid may hold and use: connections open at once, new connections per second, and
/// requests per second (token buckets, off unless configured). One table for the whole server, since
/// a uid's connections may sit on different event loops; the server keeps it under a lock
/// (`ServerCore.peers`).
///
/// A connection that committed a frame error keeps its place in its uid's count for
/// `frame_error_hold` after it closed (a held slot): a client churning through bad connections runs
/// into `max_connections_per_uid`, and is then refused at connect, which costs keyholed far less than
/// serving a connection does (PROTOCOL.md, "Limits per user").
///
/// A state machine: the caller passes the time and the limits, and acts on what it returns.
struct PeerLimits {
    /// The rates a uid is held to, as configured when its connection opened.
    struct Rates: Equatable {
        /// Requests per second and the bucket's size; a rate of 0: no limit.
        var requests = 0.0, requestBurst = 1.0
        /// New connections per second and the bucket's size; a rate of 0: no limit.
        var connections = 0.0, connectionBurst = 1.0
    }

    private struct Entry {
        var connections = 0
        /// When each held slot frees up, soonest first. (An array: empty, it allocates nothing, and
        /// most uids never commit a frame error.)
        var held: [NIODeadline] = []
        /// Connections refused at connect waiting for their answer (`holdRefusal`).
        var refusalsHeld = 0
        var requestBucket: TokenBucket?
        var connectionBucket: TokenBucket?

        /// Frees the held slots whose time is up.
        mutating func expireHeld(now: NIODeadline) {
            guard let first = held.first, first <= now else { return }
            held.removeFirst(held.firstIndex { $0 > now } ?? held.count)
        }

        /// Whether it holds nothing worth keeping: no connection, no held slot, and no bucket that
        /// is not full.
        func isRested(now: NIODeadline, rates: Rates) -> Bool {
            connections <= 0 && held.isEmpty && refusalsHeld <= 0
                && (requestBucket?.isFull(now: now, rate: rates.requests, capacity: rates.requestBurst) ?? true)
                && (connectionBucket?.isFull(now: now, rate: rates.connections, capacity: rates.connectionBurst) ?? true)
        }
    }

    private var entries: [UInt32: Entry] = [:]
    /// When uids with no connection left are next looked at, to forget those whose buckets have
    /// filled up since.
    private var nextSweep: NIODeadline?

    /// What `openConnection` decided.
    enum Admission: Equatable {
        case admitted
        /// `max_connections_per_uid` reached: `connections` open, `held` slots of connections closed
        /// after a frame error.
        case atLimit(connections: Int, held: Int)
        /// Over the rate of new connections: the wait until one would be taken.
        case overRate(TimeAmount)
    }

    /// Counts a new connection of `uid` when it has room under `limit` and its connection rate;
    /// otherwise counts nothing and says why. A refused connection takes nothing from the bucket.
    mutating func openConnection(uid: UInt32, limit: Int, now: NIODeadline, rates: Rates) -> Admission {
        // Taken out and put back, so that its array is changed in place rather than copied.
        var entry = entries.removeValue(forKey: uid) ?? Entry()
        entry.expireHeld(now: now)
        defer { entries[uid] = entry.isRested(now: now, rates: rates) ? nil : entry }
        guard entry.connections + entry.held.count < limit else {
            return .atLimit(connections: entry.connections, held: entry.held.count)
        }
        if rates.connections > 0 {
            var bucket = entry.connectionBucket ?? TokenBucket(tokens: rates.connectionBurst, at: now)
            if let wait = bucket.take(now: now, rate: rates.connections, capacity: rates.connectionBurst) { return .overRate(wait) }
            entry.connectionBucket = bucket
        }
        entry.connections += 1
        return .admitted
    }

    /// Gives back a connection counted by `openConnection`; with `holding`, its slot stays taken until
    /// then (a frame error's hold).
    ///
    /// A uid with no connection left keeps its buckets until they would be full again (`rates` as now
    /// configured), so that closing and opening connections cannot refill them; then it is forgotten,
    /// as after a quiet spell. Such uids are looked at here, once a second at most (whichever uid's
    /// connection closes): the table holds uids with connections and at most every uid that has had
    /// one, which the kernel's users bound, never more entries than those.
    mutating func closeConnection(uid: UInt32, now: NIODeadline, rates: Rates, holding: NIODeadline? = nil) {
        if var entry = entries.removeValue(forKey: uid) {
            entry.connections -= 1
            entry.expireHeld(now: now)
            if let holding, holding > now {
                // Kept in order: a reload may have shortened the hold since earlier slots were taken.
                let index = entry.held.lastIndex { $0 <= holding }.map { entry.held.index(after: $0) } ?? entry.held.startIndex
                entry.held.insert(holding, at: index)
            }
            entries[uid] = entry.isRested(now: now, rates: rates) ? nil : entry
        }
        guard now >= nextSweep ?? now else { return }
        nextSweep = now + .seconds(1)
        entries = entries.compactMapValues { entry in
            var entry = entry
            entry.expireHeld(now: now)
            return entry.isRested(now: now, rates: rates) ? nil : entry
        }
    }

    /// Refused connections of one uid waiting for their answer at most: past this many, a refused
    /// connection is answered at once. Waiting makes a client that cycles through refused
    /// connections wait `refusalDelay` for each, which costs keyholed one descriptor and no work.
    /// Small, as they count towards `max_connections` meanwhile: one uid must not take much of it
    /// that way (16 was as good as 64 against 128 threads churning: REQUEST_LOOP.md, "Churn").
    static let refusalsHeldPerUID = 16

    /// How long a connection refused at connect waits for its answer (at least: the loop's timers
    /// are swept, `SocketLoop.Configuration.sweepInterval`).
    static let refusalDelay = TimeAmount.milliseconds(100)

    /// Counts one more refused connection of `uid` held open; `false` (nothing counted) at
    /// `refusalsHeldPerUID`.
    mutating func holdRefusal(uid: UInt32) -> Bool {
        var entry = entries[uid, default: Entry()]
        guard entry.refusalsHeld < Self.refusalsHeldPerUID else { return false }
        entry.refusalsHeld += 1
        entries[uid] = entry
        return true
    }

    /// Gives back a refused connection counted by `holdRefusal`, once it closed.
    mutating func releaseRefusal(uid: UInt32, now: NIODeadline, rates: Rates) {
        guard var entry = entries[uid] else { return }
        entry.refusalsHeld -= 1
        entries[uid] = entry.isRested(now: now, rates: rates) ? nil : entry
    }

    /// Takes one request from `uid`'s bucket, which holds `burst` requests and refills at `rate` per
    /// second: `nil` when it may go ahead, else how long until it may.
    mutating func takeRequest(uid: UInt32, now: NIODeadline, rates: Rates) -> TimeAmount? {
        // Every connection whose uid is known was counted, so its entry exists.
        guard rates.requests > 0, var entry = entries[uid] else { return nil }
        var bucket = entry.requestBucket ?? TokenBucket(tokens: rates.requestBurst, at: now)
        let wait = bucket.take(now: now, rate: rates.requests, capacity: rates.requestBurst)
        entry.requestBucket = bucket
        entries[uid] = entry
        return wait
    }

    /// Connections open for `uid`.
    func connections(of uid: UInt32) -> Int { entries[uid]?.connections ?? 0 }

    /// Slots of `uid` held after frame errors (as of the last call that looked at it).
    func held(of uid: UInt32) -> Int { entries[uid]?.held.count ?? 0 }

    /// When the first of `uid`'s held slots frees up, if it has any.
    func firstHeldFrees(of uid: UInt32) -> NIODeadline? { entries[uid]?.held.first }

    /// How many uids the table holds (those with connections or held slots, and those whose buckets
    /// are refilling).
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
