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

    /// Deletes `principal`'s record and every session of theirs. Returns whether there was anything
    /// (a record or a session) and how many live sessions went.
    public func deleteUser(_ principal: Principal, now: Int64, completion: @escaping Completion) throws(StoreError) -> (deleted: Bool, sessions: Int) {
        try change(completion) { tables, undo throws(StoreError) -> ((Bool, Int), [StoreRecord]) in
            let live = tables.liveSessionCount(of: principal, now: now)
            let hadUser = tables.user(principal) != nil
            let removed = tables.removeAll(of: principal, undo: &undo)
            guard hadUser || removed > 0 else { return ((false, 0), []) }
            tables.setUser(principal, nil, undo: &undo)
            return ((true, live), [.userDelete(principal)])
        }
    }
}
