import NIOCore

extension Store {
    /// Creates a session for `principal` and returns its token (shown once, never stored) and the
    /// session. Creates the user's record when they have none and stamps their last login.
    ///
    /// - Parameters:
    ///   - ttl: seconds until the session ends however much it is used.
    ///   - idle: seconds it may go unused.
    ///   - data: compact JSON of an object, or `nil`.
    ///   - completion: runs when the session is durable (or failed to be).
    /// - Throws: `StoreError.unavailable` while writes are refused; `.io` if the CSPRNG fails.
    public func createSession(
        for principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?,
        completion: @escaping Completion
    ) throws(StoreError) -> (token: String, session: Session) {
        // A repeated id needs a repeated 128-bit hash prefix: retrying is for form's sake.
        for _ in 0..<3 {
            guard let (token, id, check) = SessionToken.generate() else {
                throw .io("the random number generator failed")
            }
            let new = StoreRecord.NewSession(
                id: id, check: check, principal: principal, createdAt: now, expiresAt: now + ttl, idleSeconds: idle, data: data)
            let created = try change(completion) { tables, undo throws(StoreError) -> (Session?, [StoreRecord]) in
                guard tables.slot(of: id) == nil else { return (nil, []) }
                let slot = tables.createAbsent(new, undo: &undo)
                return (tables.session(at: slot), [.sessionCreate(new)])
            }
            if let created { return (token, created) }
        }
        throw .io("could not find an unused session id")
    }

    /// The live session `token` names, and its user's record, marking it as used now (which extends
    /// its idle deadline); `nil` for an unknown, revoked or expired session alike.
    public func session(token: String, now: Int64) -> (session: Session, user: User?)? {
        var token = token
        return token.withUTF8 { session(token: UnsafeRawBufferPointer($0), now: now) }
    }

    /// `session(token:now:)` for a token's UTF-8 bytes, read where they lie (a request's frame).
    public func session(token: UnsafeRawBufferPointer, now: Int64) -> (session: Session, user: User?)? {
        guard let digest = SessionToken.digest(bytes: token) else { return nil }
        return state.withLock { state -> (Session, User?)? in
            guard let slot = used(digest, now: now, in: &state) else { return nil }
            return (state.tables.session(at: slot), state.tables.user(ofSession: slot))
        }
    }

    /// The slot of the live session `digest` names, marked as used now (its touch queued when the
    /// log's last_seen_at is a touch interval behind); `nil` for an unknown or expired one.
    private func used(_ digest: (SessionID, SessionCheck), now: Int64, in state: inout State) -> UInt32? {
        guard let slot = state.tables.slot(of: digest.0, check: digest.1), !state.tables.isExpired(slot, now: now) else { return nil }
        var undo: [StoreTables.Undo]? = []
        if let touch = state.tables.touch(slot, now: now, touchInterval: configuration.touchInterval, undo: &undo) {
            state.queueQuietly([touch], undo: undo ?? [])
        }
        return slot
    }

    /// `session.get` in one hold of the lock: finds the live session `token` names, marks it used, and
    /// writes its result at the end of `buffer` (`StoreTables.writeSessionJSON`); `found` is `false`
    /// (nothing written) for an unknown, revoked or expired session alike. `waits` says whether the
    /// answer must wait for the disk (changes the read could have seen are not durable yet), and then
    /// `waiter` was called (under the lock: it must only make the completion). One hold for the read
    /// and the check of what it saw: no write can fail between them, so, unlike
    /// `observing(_:waiter:)`, it never fails at once.
    public func writeSession(
        token: UnsafeRawBufferPointer, now: Int64, into buffer: inout ByteBuffer, waiter: () -> Completion
    ) -> (found: Bool, waits: Bool) {
        let digest = SessionToken.digest(bytes: token)
        return state.withLock { state in
            guard let digest, let slot = used(digest, now: now, in: &state) else { return (false, state.observe(waiter())) }
            state.tables.writeSessionJSON(slot, to: &buffer)
            return (true, state.observe(waiter()))
        }
    }

    /// Revokes the session `token` names; `false` when there is no live one (unknown, revoked and
    /// expired look alike).
    public func revokeSession(token: String, now: Int64, completion: @escaping Completion) throws(StoreError) -> Bool {
        guard let (id, check) = SessionToken.digest(token) else {
            completion(.success(()))
            return false
        }
        return try revoke(id: id, check: check, now: now, completion: completion)
    }

    /// Revokes session `id`; `false` when there is no live one.
    public func revokeSession(id: SessionID, now: Int64, completion: @escaping Completion) throws(StoreError) -> Bool {
        try revoke(id: id, check: nil, now: now, completion: completion)
    }

    private func revoke(id: SessionID, check: SessionCheck?, now: Int64, completion: @escaping Completion) throws(StoreError) -> Bool {
        try change(completion) { tables, undo throws(StoreError) -> (Bool, [StoreRecord]) in
            let slot = check.map { tables.slot(of: id, check: $0) } ?? tables.slot(of: id)
            guard let slot else { return (false, []) }
            if tables.isExpired(slot, now: now) {
                // Expiry needs no record: the log's times say it already.
                var none: [StoreTables.Undo]? = nil
                tables.remove(id, undo: &none)
                return (false, [])
            }
            tables.remove(id, undo: &undo)
            return (true, [.sessionRevoke(id)])
        }
    }

    /// Revokes every session of `principal`; returns how many were live.
    public func revokeSessions(of principal: Principal, now: Int64, completion: @escaping Completion) throws(StoreError) -> Int {
        try change(completion) { tables, undo throws(StoreError) -> (Int, [StoreRecord]) in
            let live = tables.liveSessionCount(of: principal, now: now)
            guard live > 0 else {
                var none: [StoreTables.Undo]? = nil
                _ = tables.removeAll(of: principal, undo: &none)
                return (0, [])
            }
            _ = tables.removeAll(of: principal, undo: &undo)
            return (live, [.sessionRevokeAll(principal)])
        }
    }

    /// The live sessions of `principal`, oldest first.
    public func sessions(of principal: Principal, now: Int64) -> [Session] {
        state.withLock { $0.tables.sessions(of: principal, now: now) }
    }

    /// Removes up to `limit` expired sessions from memory, from slot `cursor` on (no record: expiry
    /// follows from the logged times). Returns how many went and the cursor to go on from (0: done).
    public func sweepExpired(now: Int64, from cursor: Int, limit: Int) -> (removed: Int, next: Int) {
        state.withLock { $0.tables.sweep(now: now, from: cursor, limit: limit) }
    }
}
