extension Store {
    /// `principal`'s user record, if they have one.
    public func user(_ principal: Principal) -> User? {
        state.withLock { $0.tables.user(principal) }
    }

    /// Changes `principal`'s record with `update`, creating it first when missing. Returns the record
    /// and whether it was created. Nothing is written when `update` changes nothing.
    public func updateUser(
        _ principal: Principal, now: Int64, completion: @escaping Completion, _ update: (inout User) -> Void
    ) throws(StoreError) -> (user: User, created: Bool) {
        try change(completion) { tables, undo throws(StoreError) -> ((User, Bool), [StoreRecord]) in
            let before = tables.user(principal)
            var user = before ?? User(principal: principal, createdAt: now, updatedAt: now)
            update(&user)
            guard user != before else { return ((user, false), []) }
            user.updatedAt = max(now, user.createdAt)
            tables.setUser(principal, StoreTables.UserState(user), undo: &undo)
            return ((user, before == nil), [.userPut(principal, user.recordJSON)])
        }
    }

    /// A sign-in: `principal`'s record made if missing and changed by `update`, and a new session of
    /// theirs (as `createSession`, which stamps the record's last login), in one change: one batch in
    /// the log, so a crash keeps both or neither. Returns the record after, whether it was made, and
    /// the session with its token.
    public func signIn(
        _ principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?, completion: @escaping Completion,
        _ update: (inout User) -> Void
    ) throws(StoreError) -> (user: User, created: Bool, token: String, session: Session) {
        // A repeated id needs a repeated 128-bit hash prefix: retrying is for form's sake.
        for _ in 0..<3 {
            guard let (token, id, check) = SessionToken.generate() else { throw .io("the random number generator failed") }
            let new = StoreRecord.NewSession(
                id: id, check: check, principal: principal, createdAt: now, expiresAt: now + ttl, idleSeconds: idle, data: data)
            let signedIn = try change(completion) { tables, undo throws(StoreError) -> ((User, Bool, Session)?, [StoreRecord]) in
                guard tables.slot(of: id) == nil else { return (nil, []) }
                let before = tables.user(principal)
                var user = before ?? User(principal: principal, createdAt: now, updatedAt: now)
                update(&user)
                var records: [StoreRecord] = []
                if user != before {
                    user.updatedAt = max(now, user.createdAt)
                    tables.setUser(principal, StoreTables.UserState(user), undo: &undo)
                    records.append(.userPut(principal, user.recordJSON))
                }
                let slot = tables.createAbsent(new, undo: &undo)
                records.append(.sessionCreate(new))
                return ((tables.user(ofSession: slot) ?? user, before == nil, tables.session(at: slot)), records)
            }
            if let (user, created, session) = signedIn { return (user, created, token, session) }
        }
        throw .io("could not find an unused session id")
    }

    /// Deletes `principal`'s record and every session of theirs. Returns whether there was anything
    /// (a record or a session) and how many live sessions went.
    public func deleteUser(_ principal: Principal, now: Int64, completion: @escaping Completion) throws(StoreError) -> (deleted: Bool, sessions: Int) {
        let deleted = try deleteUser(principal, now: now, completion: completion) { _ in nil }
        return (deleted.deleted, deleted.sessions)
    }

    /// Changes `principal`'s record with `update` when they have one (never creating it). `update`
    /// returns whether the change applies: when it returns false nothing is done (whatever it
    /// changed is dropped). With `revokeSessions`, an applied change also removes every session of
    /// theirs, in the same change. Returns the record as it is after (`nil` when there was none),
    /// whether the change applied, and how many live sessions went.
    public func modifyUser(
        _ principal: Principal, now: Int64, revokeSessions: Bool = false, completion: @escaping Completion,
        _ update: (inout User) -> Bool
    ) throws(StoreError) -> (user: User, applied: Bool, sessions: Int)? {
        try change(completion) { tables, undo throws(StoreError) -> ((User, Bool, Int)?, [StoreRecord]) in
            guard let before = tables.user(principal) else { return (nil, []) }
            var user = before
            guard update(&user) else { return ((before, false, 0), []) }
            var records: [StoreRecord] = []
            var live = 0
            if revokeSessions {
                live = tables.liveSessionCount(of: principal, now: now)
                if tables.removeAll(of: principal, undo: &undo) > 0 { records.append(.sessionRevokeAll(principal)) }
            }
            if user != before {
                user.updatedAt = max(now, user.createdAt)
                tables.setUser(principal, StoreTables.UserState(user), undo: &undo)
                records.append(.userPut(principal, user.recordJSON))
            }
            return ((user, true, live), records)
        }
    }

    /// Moves `from`'s record and every session of theirs to `to` (a team transfer gives the user a
    /// new sub): sessions keep their tokens and times. A record `to` already has wins, member by
    /// member; `adjust` then changes the record as moved (under the lock). Returns the record after
    /// (`nil` when `from` had neither record nor live session) and how many sessions moved.
    ///
    /// Logged as records whose replay is exact over any snapshot (WALRecordTypes.md, "Replay"): the
    /// merged user.put for `to`, a session.create (and a session.touch for its last use) per session,
    /// then user.delete of `from`. A crash that keeps only the first of them loses nothing: the
    /// record is then under both principals.
    public func moveUser(
        _ from: Principal, to: Principal, now: Int64, completion: @escaping Completion, adjust: (inout User) -> Void = { _ in }
    ) throws(StoreError) -> (user: User?, sessions: Int)? {
        try change(completion) { tables, undo throws(StoreError) -> ((User?, Int)?, [StoreRecord]) in
            let moving = tables.sessions(of: from, now: now)
            let user = tables.user(from)
            guard from != to, user != nil || !moving.isEmpty else { return (nil, []) }
            var records: [StoreRecord] = []
            var merged: User?
            if let user {
                var result = tables.user(to) ?? User(principal: to, createdAt: user.createdAt, updatedAt: now)
                result.fields.merge(user.fields) { kept, _ in kept }
                result.createdAt = min(result.createdAt, user.createdAt)
                result.lastLoginAt = [result.lastLoginAt, user.lastLoginAt].compactMap { $0 }.max()
                adjust(&result)
                result.updatedAt = max(now, result.createdAt)
                tables.setUser(to, StoreTables.UserState(result), undo: &undo)
                records.append(.userPut(to, result.recordJSON))
                merged = result
            }
            for session in moving {
                let new = StoreRecord.NewSession(
                    id: session.id, check: tables.check(of: session.id)!, principal: to, createdAt: session.createdAt,
                    expiresAt: session.expiresAt, idleSeconds: session.idleSeconds, data: session.data)
                tables.create(new, undo: &undo)
                records.append(.sessionCreate(new))
                if session.lastSeenAt > session.createdAt, let slot = tables.slot(of: session.id),
                    let touch = tables.touch(slot, now: session.lastSeenAt, touchInterval: 0, undo: &undo)
                {
                    records.append(touch)
                }
            }
            // Whatever is left under `from` (expired sessions) goes with the record.
            _ = tables.removeAll(of: from, undo: &undo)
            tables.setUser(from, nil, undo: &undo)
            records.append(.userDelete(from))
            return ((merged ?? tables.user(to), moving.count), records)
        }
    }

    /// The users in principal slots from `cursor` on (`limit` slots at most, under one hold of the
    /// lock) that `include` accepts, and where to go on (0 after the last slot): a background task
    /// walks every user a slice at a time without holding up requests.
    public func users(from cursor: Int, limit: Int, where include: (User) -> Bool) -> (users: [User], next: Int) {
        state.withLock { state in
            let tables = state.tables
            var found: [User] = []
            let end = min(tables.principalSlots.count, cursor + limit)
            var slot = cursor
            while slot < end {
                let entry = tables.principalSlots[UInt32(slot)]
                if let user = entry.user {
                    let candidate = User(entry.key, user)
                    if include(candidate) { found.append(candidate) }
                }
                slot += 1
            }
            return (found, slot >= tables.principalSlots.count ? 0 : slot)
        }
    }
}
