import KeyholeProtocol

/// The in-memory users and sessions, without locks or I/O: the store owns one under its lock.
///
/// Sessions and principals live in slot arrays, indexed by dictionaries of small integers, with each
/// principal's sessions chained through their slots: a session costs one slot and one index entry, and
/// removing one is O(1). Every mutation can record how to undo itself, for when its log record does
/// not reach the disk.
struct StoreTables {
    static let none = UInt32.max

    struct SessionSlot: SlotIndexed {
        var id: SessionID
        var check: SessionCheck
        var principal: UInt32
        var createdAt: Int64
        var expiresAt: Int64
        var lastSeenAt: Int64
        /// The last_seen_at the log knows (creation or the last touch record).
        var loggedSeenAt: Int64
        var idleSeconds: UInt32
        var data: [UInt8]?
        var previous: UInt32
        var next: UInt32

        var endsAt: Int64 { min(expiresAt, lastSeenAt + Int64(idleSeconds)) }
        var indexKey: SessionID { id }
    }

    struct UserState: Equatable {
        var createdAt: Int64
        var updatedAt: Int64
        var lastLoginAt: Int64?
        var fields: [String: JSONValue]
    }

    struct PrincipalSlot: SlotIndexed {
        var key: Principal
        var user: UserState?
        var firstSession: UInt32
        var isLive: Bool { firstSession != StoreTables.none || user != nil }
        var indexKey: Principal { key }
    }

    /// How to take one mutation back.
    enum Undo {
        case removeSession(SessionID)
        case restoreSession(StoreRecord.NewSession, lastSeenAt: Int64, loggedSeenAt: Int64)
        case restoreLoggedSeen(SessionID, Int64)
        case restoreUser(Principal, UserState?)
        case restoreOutbox(UInt64, OutboxEntry?)
    }

    // Internal rather than private for StoreTables+Snapshot.swift only.
    var sessionIndex = SlotIndex<SessionID>()
    var sessionSlots = SlotArray<SessionSlot>()
    var principalIndex = SlotIndex<Principal>()
    var principalSlots = SlotArray<PrincipalSlot>()
    private(set) var userCount = 0
    /// Work owed outside, by id: a handful at most, so a plain dictionary.
    var outbox: [UInt64: OutboxEntry] = [:]

    var sessionCount: Int { sessionIndex.count }

    // MARK: Reading

    /// The slot of session `id` when it exists and `check` matches (constant time), expired or not.
    func slot(of id: SessionID, check: SessionCheck) -> UInt32? {
        guard let index = slot(of: id), sessionSlots[index].check.matches(check) else { return nil }
        return index
    }

    /// Session `id`'s check, expired or not.
    func check(of id: SessionID) -> SessionCheck? { slot(of: id).map { sessionSlots[$0].check } }

    /// The slot of session `id`, expired or not.
    func slot(of id: SessionID) -> UInt32? { sessionIndex.find(id, in: sessionSlots) }

    func isExpired(_ slot: UInt32, now: Int64) -> Bool { now >= sessionSlots[slot].endsAt }

    func session(at slot: UInt32) -> Session {
        let entry = sessionSlots[slot]
        return Session(
            id: entry.id, principal: principalSlots[entry.principal].key, createdAt: entry.createdAt,
            expiresAt: entry.expiresAt, lastSeenAt: entry.lastSeenAt, idleSeconds: entry.idleSeconds, data: entry.data)
    }

    /// The user owning session `slot`, if they have a record.
    func user(ofSession slot: UInt32) -> User? {
        let principal = principalSlots[sessionSlots[slot].principal]
        return principal.user.map { User(principal.key, $0) }
    }

    func user(_ principal: Principal) -> User? {
        guard let index = principalIndex.find(principal, in: principalSlots), let state = principalSlots[index].user else { return nil }
        return User(principal, state)
    }

    /// The principal's live sessions, oldest first.
    func sessions(of principal: Principal, now: Int64) -> [Session] {
        var result: [Session] = []
        forEachSession(of: principal) { slot in
            if !isExpired(slot, now: now) { result.append(session(at: slot)) }
        }
        return result.sorted { ($0.createdAt, $0.id.high) < ($1.createdAt, $1.id.high) }
    }

    /// How many of the principal's sessions are live, without listing them.
    func liveSessionCount(of principal: Principal, now: Int64) -> Int {
        var count = 0
        forEachSession(of: principal) { if !isExpired($0, now: now) { count += 1 } }
        return count
    }

    private func forEachSession(of principal: Principal, _ body: (UInt32) -> Void) {
        guard let index = principalIndex.find(principal, in: principalSlots) else { return }
        var slot = principalSlots[index].firstSession
        while slot != Self.none {
            let next = sessionSlots[slot].next
            body(slot)
            slot = next
        }
    }

    // MARK: Mutating

    /// Adds a session; creates its user when they have no record and stamps their last login
    /// (WALRecordTypes.md, replay of session.create).
    mutating func create(_ new: StoreRecord.NewSession, undo: inout [Undo]?) {
        if slot(of: new.id) != nil { remove(new.id, undo: &undo) }
        createAbsent(new, undo: &undo)
    }

    /// `create` of a session whose id is known to be unused; returns its slot.
    @discardableResult
    mutating func createAbsent(_ new: StoreRecord.NewSession, undo: inout [Undo]?) -> UInt32 {
        let principal = principalSlot(for: new.principal)
        let before = principalSlots[principal].user
        undo?.append(.restoreUser(new.principal, before))
        var user = before ?? UserState(createdAt: new.createdAt, updatedAt: new.createdAt, lastLoginAt: nil, fields: [:])
        user.lastLoginAt = max(user.lastLoginAt ?? new.createdAt, new.createdAt)
        setUser(principal, user)
        let slot = insert(new, principal: principal, lastSeenAt: new.createdAt, loggedSeenAt: new.createdAt)
        undo?.append(.removeSession(new.id))
        return slot
    }

    @discardableResult
    mutating func insert(_ new: StoreRecord.NewSession, principal: UInt32, lastSeenAt: Int64, loggedSeenAt: Int64) -> UInt32 {
        let head = principalSlots[principal].firstSession
        let entry = SessionSlot(
            id: new.id, check: new.check, principal: principal, createdAt: new.createdAt, expiresAt: new.expiresAt,
            lastSeenAt: lastSeenAt, loggedSeenAt: loggedSeenAt, idleSeconds: new.idleSeconds, data: new.data,
            previous: Self.none, next: head)
        let slot = sessionSlots.insert(entry)
        if head != Self.none { sessionSlots[head].previous = slot }
        principalSlots[principal].firstSession = slot
        sessionIndex.insert(slot, in: sessionSlots)
        return slot
    }

    /// Marks session `slot` as presented at `now`. Returns the touch record to log when the log's
    /// last_seen_at is `touchInterval` or more behind.
    mutating func touch(_ slot: UInt32, now: Int64, touchInterval: Int64, undo: inout [Undo]?) -> StoreRecord? {
        let index = slot
        guard now > sessionSlots[index].lastSeenAt else { return nil }
        sessionSlots[index].lastSeenAt = now
        guard now - sessionSlots[index].loggedSeenAt >= touchInterval else { return nil }
        undo?.append(.restoreLoggedSeen(sessionSlots[index].id, sessionSlots[index].loggedSeenAt))
        sessionSlots[index].loggedSeenAt = now
        return .sessionTouch(sessionSlots[index].id, lastSeenAt: now)
    }

    /// Removes session `id`; `false` when there is none.
    @discardableResult
    mutating func remove(_ id: SessionID, undo: inout [Undo]?) -> Bool {
        guard let slot = sessionIndex.remove(id, in: sessionSlots) else { return false }
        let entry = sessionSlots[slot]
        let principal = entry.principal
        undo?.append(.restoreSession(
            StoreRecord.NewSession(
                id: entry.id, check: entry.check, principal: principalSlots[principal].key,
                createdAt: entry.createdAt, expiresAt: entry.expiresAt, idleSeconds: entry.idleSeconds, data: entry.data),
            lastSeenAt: entry.lastSeenAt, loggedSeenAt: entry.loggedSeenAt))
        if entry.previous != Self.none {
            sessionSlots[entry.previous].next = entry.next
        } else {
            principalSlots[principal].firstSession = entry.next
        }
        if entry.next != Self.none { sessionSlots[entry.next].previous = entry.previous }
        // Free the slot's data now rather than when the slot is reused; a free slot has no principal.
        sessionSlots[slot].data = nil
        sessionSlots[slot].principal = Self.none
        sessionSlots.release(slot)
        releaseIfEmpty(principal)
        return true
    }

    /// Removes every session of `principal`; returns how many there were (expired ones included).
    mutating func removeAll(of principal: Principal, undo: inout [Undo]?) -> Int {
        var ids: [SessionID] = []
        forEachSession(of: principal) { ids.append(sessionSlots[$0].id) }
        for id in ids { remove(id, undo: &undo) }
        return ids.count
    }

    /// Sets or clears `principal`'s user record.
    mutating func setUser(_ principal: Principal, _ user: UserState?, undo: inout [Undo]?) {
        let index = principalSlot(for: principal)
        undo?.append(.restoreUser(principal, principalSlots[index].user))
        setUser(index, user)
        releaseIfEmpty(index)
    }

    mutating func setUser(_ index: UInt32, _ user: UserState?) {
        let had = principalSlots[index].user != nil
        principalSlots[index].user = user
        userCount += (user != nil ? 1 : 0) - (had ? 1 : 0)
    }

    /// Takes back `undo`'s entries, newest first.
    mutating func rollBack(_ undo: [Undo]) {
        var none: [Undo]? = nil
        for entry in undo.reversed() {
            switch entry {
            case .removeSession(let id):
                remove(id, undo: &none)
            case .restoreSession(let new, let lastSeenAt, let loggedSeenAt):
                insert(new, principal: principalSlot(for: new.principal), lastSeenAt: lastSeenAt, loggedSeenAt: loggedSeenAt)
            case .restoreLoggedSeen(let id, let loggedSeenAt):
                if let slot = slot(of: id) { sessionSlots[slot].loggedSeenAt = loggedSeenAt }
            case .restoreUser(let principal, let user):
                setUser(principal, user, undo: &none)
            case .restoreOutbox(let id, let entry):
                outbox[id] = entry
            }
        }
    }

    /// Applies a record from the log (replay at start-up).
    mutating func apply(_ record: StoreRecord) {
        var none: [Undo]? = nil
        switch record {
        case .noop:
            break
        case .sessionCreate(let new):
            create(new, undo: &none)
        case .sessionTouch(let id, let lastSeenAt):
            if let slot = slot(of: id) {
                sessionSlots[slot].lastSeenAt = max(sessionSlots[slot].lastSeenAt, lastSeenAt)
                sessionSlots[slot].loggedSeenAt = sessionSlots[slot].lastSeenAt
            }
        case .sessionRevoke(let id):
            remove(id, undo: &none)
        case .sessionRevokeAll(let principal):
            _ = removeAll(of: principal, undo: &none)
        case .userPut(let principal, let json):
            // Decoding checked the JSON; a record that is not a user was refused there.
            if let user = User(principal: principal, recordJSON: json) {
                setUser(principal, UserState(user), undo: &none)
            }
        case .userDelete(let principal):
            _ = removeAll(of: principal, undo: &none)
            setUser(principal, nil, undo: &none)
        case .outboxPut(let entry):
            outbox[entry.id] = entry
        case .outboxDone(let id):
            outbox[id] = nil
        }
    }

    /// Removes up to `limit` expired sessions from slot `cursor` on; returns how many it removed and
    /// where to go on (0 after the last slot).
    mutating func sweep(now: Int64, from cursor: Int, limit: Int) -> (removed: Int, next: Int) {
        var removed = 0
        var slot = cursor
        var none: [Undo]? = nil
        let end = min(sessionSlots.count, cursor + limit)
        while slot < end {
            let entry = sessionSlots[UInt32(slot)]
            if entry.principal != Self.none, now >= entry.endsAt {
                remove(entry.id, undo: &none)
                removed += 1
            }
            slot += 1
        }
        return (removed, slot >= sessionSlots.count ? 0 : slot)
    }

    /// Adds or replaces an outbox entry (`nil` removes it).
    mutating func setOutbox(_ id: UInt64, _ entry: OutboxEntry?, undo: inout [Undo]?) {
        undo?.append(.restoreOutbox(id, outbox[id]))
        outbox[id] = entry
    }

    // MARK: Principals

    mutating func principalSlot(for key: Principal) -> UInt32 {
        if let index = principalIndex.find(key, in: principalSlots) { return index }
        let index = principalSlots.insert(PrincipalSlot(key: key, user: nil, firstSession: Self.none))
        principalIndex.insert(index, in: principalSlots)
        return index
    }

    private mutating func releaseIfEmpty(_ index: UInt32) {
        guard !principalSlots[index].isLive else { return }
        _ = principalIndex.remove(principalSlots[index].key, in: principalSlots)
        principalSlots[index].key = Principal(issuer: "", sub: "")
        principalSlots.release(index)
    }
}

extension User {
    init(_ principal: Principal, _ state: StoreTables.UserState) {
        self.init(principal: principal, createdAt: state.createdAt, updatedAt: state.updatedAt, lastLoginAt: state.lastLoginAt, fields: state.fields)
    }
}

extension StoreTables.UserState {
    init(_ user: User) {
        self.init(createdAt: user.createdAt, updatedAt: user.updatedAt, lastLoginAt: user.lastLoginAt, fields: user.fields)
    }
}
