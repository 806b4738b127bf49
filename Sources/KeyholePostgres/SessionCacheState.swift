import KeyholeStore
import NIOCore

/// The per-host cache of sessions and when it may be used (POSTGRES.md, "Reads"), as a state
/// machine without I/O: the listener feeds it what it hears, the store asks it before reading the
/// database, and time comes from the caller.
///
/// The cache is used only while this host's view is provably fresh: the listener is connected and
/// has heard, since it (re)connected, a heartbeat this host sent less than `maxStaleness` ago. A
/// heartbeat heard proves every change committed before it was sent has been heard too (PostgreSQL
/// delivers notifications in commit order), so what the cache holds is at most that old.
struct SessionCacheState {
    struct Entry {
        var session: Session
        /// The row's check, compared with the token's on every hit (in constant time, by the store).
        var check: SessionCheck
        var user: User?
        /// The user's notification key (`u:...`), to drop the entry when the user changes.
        var userKey: String
    }

    /// What `lookup` tells the store to do.
    enum Lookup {
        /// Serve this (the caller still checks the token's check and the session's expiry).
        case hit(Session, SessionCheck, User?)
        /// Read the database, then `fill` with this ticket.
        case miss(FillTicket)
        /// Read the database and do not fill: the view is not fresh.
        case bypass
    }

    /// Taken before a database read, so that a fill that raced an invalidation is not kept.
    struct FillTicket: Equatable {
        let epoch: UInt64
        let sequence: UInt64
    }

    let capacity: Int
    let maxStaleness: Double
    /// How many invalidations are remembered for racing fills; a fill older than all of them is dropped.
    let remembered: Int

    /// Two generations, for eviction in constant time: entries go into `young`; a hit in `old` moves
    /// back to `young`; when `young` holds half the capacity, `old` is dropped and `young` becomes
    /// it. What was not used for a generation goes, and there are never more than `capacity`.
    private var young: [SessionID: Entry] = [:]
    private var old: [SessionID: Entry] = [:]
    /// The sessions cached per user key, so that a user's invalidation drops theirs without a scan.
    private var byUser: [String: Set<SessionID>] = [:]
    /// One more each time the listener (re)connects: a fill from before is dropped.
    private var epoch: UInt64 = 0
    private var connected = false
    /// When the newest heartbeat heard on this connection was sent (nil: none yet).
    private var freshAsOf: Double?
    /// Heartbeats sent and not heard yet: sequence → send time.
    private var pendingHeartbeats: [UInt64: Double] = [:]
    /// Invalidations heard, oldest first, with their sequence numbers.
    private var invalidations = CircularBuffer<(sequence: UInt64, key: String)>()
    private var sequence: UInt64 = 0

    init(capacity: Int, maxStaleness: Double, remembered: Int = 4096) {
        self.capacity = capacity
        self.maxStaleness = maxStaleness
        self.remembered = remembered
    }

    /// Whether the cache may be used at `now`.
    func isFresh(now: Double) -> Bool {
        guard connected, let freshAsOf else { return false }
        return now - freshAsOf < maxStaleness
    }

    var count: Int { young.count + old.count }

    /// The age of the view at `now` (nil: not fresh since the listener last connected).
    func staleness(now: Double) -> Double? { freshAsOf.map { now - $0 } }

    /// `body` on `id`'s entry, in place (no copy of the session or the user), when the view is
    /// fresh and the entry is among the recently used; nil otherwise (the caller takes `lookup`'s
    /// way, which also promotes an older entry). `inout` only so that nothing is copied: `body`
    /// reads the entry and must not change it (other indexes refer to it).
    mutating func withRecentHit<Result>(_ id: SessionID, now: Double, _ body: (inout Entry) -> Result) -> Result? {
        guard capacity > 0, isFresh(now: now), let index = young.index(forKey: id) else { return nil }
        return body(&young.values[index])
    }

    mutating func lookup(_ id: SessionID, now: Double) -> Lookup {
        guard capacity > 0, isFresh(now: now) else { return .bypass }
        if let entry = young[id] { return .hit(entry.session, entry.check, entry.user) }
        if let entry = old.removeValue(forKey: id) {
            insertYoung(id, entry)
            return .hit(entry.session, entry.check, entry.user)
        }
        return .miss(FillTicket(epoch: epoch, sequence: sequence))
    }

    /// Keeps what a read found, unless an invalidation of its session, its user or everything was
    /// heard since `ticket` was taken, or the listener reconnected, or too many invalidations came
    /// to tell. Returns whether it was kept.
    @discardableResult
    mutating func fill(_ ticket: FillTicket, session: Session, check: SessionCheck, user: User?, userKey: String, now: Double) -> Bool {
        guard ticket.epoch == epoch, isFresh(now: now) else { return false }
        if ticket.sequence < sequence {
            // The invalidations since the ticket must all still be remembered to be checked: the
            // newest ones, back to the ticket (sequence numbers are consecutive), no further.
            let since = Int(sequence - ticket.sequence)
            guard since <= invalidations.count else { return false }
            let sessionKey = Self.sessionKey(session.id)
            for invalidation in invalidations.suffix(since) {
                if invalidation.key == "*" || invalidation.key == sessionKey || invalidation.key == userKey { return false }
            }
        }
        remove(session.id)
        insertYoung(session.id, Entry(session: session, check: check, user: user, userKey: userKey))
        return true
    }

    /// A session read again from the database, or written, by this host: keeps the cache in step
    /// with what this host itself did (a touch's last use).
    mutating func update(_ session: Session) {
        // Through an index, not `young[id]?.session = session`: a subscript's modify on a table that
        // is empty (no cache, or a cold one) allocates storage for it each time, and a miss's
        // answer runs this on the database connections' event loop.
        if let index = young.index(forKey: session.id) { young.values[index].session = session }
        if let index = old.index(forKey: session.id) { old.values[index].session = session }
    }

    /// What the listener heard: an invalidation (`s:`, `u:`, `*`) or a heartbeat (`h:<host>:<n>`,
    /// handled by `heard(heartbeat:)`). Unknown payloads drop everything: never serve what a newer
    /// keyholed's message might have meant to invalidate.
    mutating func heard(_ payload: String) {
        sequence += 1
        invalidations.append((sequence, payload))
        if invalidations.count > remembered { invalidations.removeFirst() }
        if payload.hasPrefix("s:"), let id = Self.sessionID(hex: payload.dropFirst(2)) {
            remove(id)
        } else if payload.hasPrefix("u:") {
            for id in byUser[payload] ?? [] { remove(id) }
        } else {
            dropAll()
        }
    }

    /// A notification on the channel, as the listener heard it: a heartbeat (`h:<host>:<number>`:
    /// this host's proves freshness, another host's means nothing here) or an invalidation.
    mutating func heard(notification payload: String, host: String) {
        if payload.hasPrefix("h:") {
            let rest = payload.dropFirst(2)
            guard let colon = rest.lastIndex(of: ":"), rest[..<colon].utf8.elementsEqual(host.utf8),
                let number = UInt64(rest[rest.index(after: colon)...])
            else { return }
            heard(heartbeat: number)
        } else {
            heard(payload)
        }
    }

    /// This host sent heartbeat `number` at `sentAt`.
    mutating func sent(heartbeat number: UInt64, at sentAt: Double) {
        pendingHeartbeats[number] = sentAt
    }

    /// This host's heartbeat `number` came back on the listener: the view is fresh as of its sending.
    mutating func heard(heartbeat number: UInt64) {
        guard connected, let sentAt = pendingHeartbeats.removeValue(forKey: number) else { return }
        freshAsOf = max(freshAsOf ?? sentAt, sentAt)
        // Older ones still pending were lost with a connection: forget them.
        pendingHeartbeats = pendingHeartbeats.filter { $0.key > number }
    }

    /// The listener (re)connected and is LISTENing: everything cached is dropped (changes while no
    /// one listened were not heard), and the view is not fresh until a heartbeat sent from now on
    /// comes back on this connection.
    mutating func listenerConnected() {
        restart(connected: true)
    }

    /// The listener lost its connection: the cache is unused until it is back.
    mutating func listenerLost() {
        restart(connected: false)
    }

    /// A new epoch: nothing cached, nothing heard, no fill from before kept.
    private mutating func restart(connected: Bool) {
        epoch += 1
        self.connected = connected
        freshAsOf = nil
        pendingHeartbeats.removeAll()
        dropAll()
    }

    private mutating func insertYoung(_ id: SessionID, _ entry: Entry) {
        if young.count >= max(1, capacity / 2) {
            // A generation ends: what is in `old` was not used during it. Each entry is dropped once,
            // so this is constant time per insert, amortised.
            for (dropped, entry) in old { unindex(dropped, entry.userKey) }
            old = young
            young = [:]
        }
        young[id] = entry
        byUser[entry.userKey, default: []].insert(id)
    }

    private mutating func remove(_ id: SessionID) {
        if let entry = young.removeValue(forKey: id) ?? old.removeValue(forKey: id) { unindex(id, entry.userKey) }
    }

    private mutating func unindex(_ id: SessionID, _ userKey: String) {
        byUser[userKey]?.remove(id)
        if byUser[userKey]?.isEmpty == true { byUser[userKey] = nil }
    }

    private mutating func dropAll() {
        young.removeAll()
        old.removeAll()
        byUser.removeAll()
    }

    static func sessionKey(_ id: SessionID) -> String { "s:" + PostgresRows.hex(id.bytes) }

    static func sessionID(hex: Substring) -> SessionID? {
        let digits = Array(hex.utf8)
        guard digits.count == 32 else { return nil }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: 32, by: 2) {
            guard let high = Self.nibble(digits[index]), let low = Self.nibble(digits[index + 1]) else { return nil }
            bytes.append(high << 4 | low)
        }
        return SessionID(bytes: bytes)
    }

    private static func nibble(_ digit: UInt8) -> UInt8? {
        switch digit {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): digit - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): digit - UInt8(ascii: "a") + 10
        default: nil
        }
    }
}
