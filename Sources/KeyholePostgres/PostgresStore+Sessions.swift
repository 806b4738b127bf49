import KeyholeStore
import NIOCore
import PostgresNIO

extension PostgresStore {
    /// Creates a session for `principal` and returns its token (shown once, never stored) and the
    /// session, once committed. Creates the user's record when they have none and stamps their last
    /// login, as the local store does. No notification: no host can have the new session cached.
    public func createSession(
        for principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?
    ) async throws(PostgresStoreError) -> (token: String, session: Session) {
        try await Deadline.run(within: configuration.timeout, doing: "creating a session") {
            try await self.createSessionUnbounded(for: principal, now: now, ttl: ttl, idle: idle, data: data)
        }
    }

    /// `createSession(for:now:ttl:idle:data:)`, its outcome handed to `completion` (once, from any
    /// thread): one task for the transaction, bounded by the deadline wheel, and none waiting for it.
    public func createSession(
        for principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?,
        completion: @escaping @Sendable (Result<(token: String, session: Session), PostgresStoreError>) -> Void
    ) {
        Deadline.start(within: configuration.timeout, doing: "creating a session", {
            try await self.createSessionUnbounded(for: principal, now: now, ttl: ttl, idle: idle, data: data)
        }, completion)
    }

    /// The session's transaction (tried again under another token if its id was taken), unbounded:
    /// its callers bound it.
    private func createSessionUnbounded(
        for principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?
    ) async throws -> (token: String, session: Session) {
        let logger = self.logger, client = self.client
        let issuer = PostgresRows.bytes(principal.issuer), sub = PostgresRows.bytes(principal.sub)
        // A repeated id needs a repeated 128-bit hash prefix: retrying is for form's sake.
        for _ in 0..<3 {
            guard let (token, id, check) = SessionToken.generate() else {
                throw PostgresStoreError.unavailable("the random number generator failed")
            }
            let session = Session(
                id: id, principal: principal, createdAt: now, expiresAt: now + ttl, lastSeenAt: now, idleSeconds: idle, data: data)
            let inserted = try await client.withTransaction(logger: logger) { connection in
                // The user's row first (made, or its login stamped): user.delete takes it first
                // too, so the two go one after the other and no session outlives its user's deletion.
                for try await _ in try await connection.execute(PostgresStatements.StampLogin(issuer: issuer, sub: sub, now: now), logger: logger) {}
                var binds = PostgresBindings()
                binds.append(PostgresRows.bytes(id.bytes))
                binds.append(PostgresRows.bytes(check.bytes))
                binds.append(issuer)
                binds.append(sub)
                binds.append(now)
                binds.append(now + ttl)
                binds.append(Int32(clamping: idle))  // the protocol keeps idle_s far below 2^31
                binds.append(data.map(PostgresRows.bytes))
                let rows = try await connection.execute(PostgresStatements.InsertSession(binds: binds), logger: logger)
                var created = false
                for try await _ in rows { created = true }
                // A repeated id: tried again with another token (the login stamp stays: a sign-in
                // did happen).
                return created
            }
            if inserted { return (token, session) }
        }
        throw PostgresStoreError.unavailable("could not find an unused session id")
    }

    /// The live session `token` names, and its user's record, marked as used now (written with the
    /// next heartbeat, `writeTouches`); `nil` for an unknown, revoked or expired session
    /// alike, and for a token whose check does not match (compared in constant time). From the
    /// cache while this host's view is fresh, else from the database (and then cached).
    public func session(token: String, now: Int64) async throws(PostgresStoreError) -> (session: Session, user: User?)? {
        switch sessionWithoutWaiting(token: token, now: now) {
        case .found(let session, let user): return (session, user)
        case .notFound: return nil
        case .mustWait: break
        }
        return try await Deadline.run(within: configuration.timeout, doing: "reading a session") {
            try await self.sessionFromDatabase(token: token, now: now)
        }
    }

    /// `session(token:now:)` with the answer handed to `completion` (once, from any thread), for a
    /// caller that need not wait in a task of its own: one task reads the database, bounded by the
    /// deadline wheel, rather than a task waiting for another.
    public func session(
        token: String, now: Int64, completion: @escaping @Sendable (Result<(session: Session, user: User?)?, PostgresStoreError>) -> Void
    ) {
        switch sessionWithoutWaiting(token: token, now: now) {
        case .found(let session, let user): return completion(.success((session, user)))
        case .notFound: return completion(.success(nil))
        case .mustWait: break
        }
        Deadline.start(within: configuration.timeout, doing: "reading a session", { try await self.sessionFromDatabase(token: token, now: now) }, completion)
    }

    /// The rest of `session(token:now:)` once the cache could not answer, unbounded (its callers bound it).
    private func sessionFromDatabase(token: String, now: Int64) async throws -> (session: Session, user: User?)? {
        guard let (id, check) = SessionToken.digest(token) else { return nil }
        let clock = monotonic()
        let lookup = cache.withLock { $0.lookup(id, now: clock) }
        var found: (session: Session, check: SessionCheck, user: User?)
        switch lookup {
        case .hit(let session, let stored, let user):
            // Cached, but idle by what this host knows, yet before its expiry (else answered above):
            // another host may have seen it used since (its uses are written within a heartbeat).
            // Ask the database rather than refuse.
            found = (session, stored, user)
            if now >= self.latestUse(found.session).endsAt, now < found.session.expiresAt {
                guard let read = try await readSession(id) else { return nil }
                found = read
            }
        case .miss(let ticket):
            guard let read = try await readSession(id) else { return nil }
            found = read
            let userKey = PostgresRows.userKey(read.session.principal)
            cache.withLock { _ = $0.fill(ticket, session: read.session, check: read.check, user: read.user, userKey: userKey, now: clock) }
        case .bypass:
            guard let read = try await readSession(id) else { return nil }
            found = read
        }
        let session = latestUse(found.session)
        guard found.check.matches(check), now < session.endsAt else { return nil }
        return (markUsed(session, now: now), found.user)
    }

    /// The session `token` names from this host's cache, without waiting: found (and marked as used)
    /// or not found on a hit; `.mustWait` on a miss, with the cache not fresh, or for a session that
    /// looks idle before its expiry (another host's use may not be written yet).
    public func sessionWithoutWaiting(token: String, now: Int64) -> ImmediateSession {
        guard let (id, check) = SessionToken.digest(token) else { return .notFound }
        let clock = monotonic()
        guard case .hit(let cached, let stored, let user) = cache.withLock({ $0.lookup(id, now: clock) }) else { return .mustWait }
        let session = latestUse(cached)
        if now >= session.endsAt, now < session.expiresAt { return .mustWait }
        guard stored.matches(check), now < session.endsAt else { return .notFound }
        return .found(markUsed(session, now: now), user)
    }

    /// `session` used at `now`: recorded here, written with the next heartbeat (at most one
    /// statement each), and so in the cache.
    private func markUsed(_ session: Session, now: Int64) -> Session {
        var session = session
        pendingTouches.withLock { pending in pending[session.id] = max(pending[session.id] ?? now, now) }
        session.lastSeenAt = max(session.lastSeenAt, now)
        cache.withLock { $0.update(session) }
        return session
    }

    /// `session` with its last use this host recorded and has not written yet, if later.
    private func latestUse(_ session: Session) -> Session {
        var session = session
        if let pending = pendingTouches.withLock({ $0[session.id] }) { session.lastSeenAt = max(session.lastSeenAt, pending) }
        return session
    }

    /// Writes the uses recorded since the last call, in one statement (never moving a last use
    /// back). What fails to be written is kept for the next call.
    func writeTouches() async {
        let batch = pendingTouches.withLock { pending -> [SessionID: Int64] in
            defer { pending.removeAll(keepingCapacity: true) }
            return pending
        }
        guard !batch.isEmpty else { return }
        let sessions = table("sessions")
        do {
            _ = try await read("writing sessions' last uses") { client in
                var binds = PostgresBindings()
                binds.append(batch.keys.map { PostgresRows.bytes($0.bytes) })
                binds.append(batch.keys.map { batch[$0]! })
                try await client.query(
                    PostgresQuery(
                        unsafeSQL: """
                            WITH locked AS MATERIALIZED (SELECT id FROM \(sessions) WHERE id = ANY($1::bytea[]) ORDER BY id FOR UPDATE)
                            UPDATE \(sessions) SET last_seen_at = greatest(last_seen_at, u.t)
                            FROM unnest($1::bytea[], $2::bigint[]) AS u(id, t)
                            WHERE \(sessions).id = u.id AND \(sessions).id IN (SELECT id FROM locked)
                            """,
                        binds: binds))
            }
        } catch {
            pendingTouches.withLock { pending in
                for (id, time) in batch { pending[id] = max(pending[id] ?? time, time) }
            }
            logger.debug("postgres.touches_failed", metadata: ["error": "\(error)"])
        }
    }

    /// The session row `id` names with its user, or nil.
    private func readSession(_ id: SessionID) async throws -> (session: Session, check: SessionCheck, user: User?)? {
        // Unbounded: its caller runs within a deadline.
        let rows = try await client.execute(PostgresStatements.ReadSession(id: PostgresRows.bytes(id.bytes)), logger: logger)
        var row: (PostgresRows.SessionRow, PostgresRows.UserRow?)?
        for try await (c, i, s, created, expires, seen, idle, data, userCreated, updated, login, fields) in rows {
            let user: PostgresRows.UserRow? =
                if let userCreated, let updated, let fields { (userCreated, updated, login, fields) } else { nil }
            row = ((c, i, s, created, expires, seen, idle, data), user)
        }
        guard let (sessionRow, userRow) = row else { return nil }
        let (session, stored) = try PostgresRows.session(id: id, sessionRow).get()
        let user = try userRow.map { row throws(PostgresStoreError) in try PostgresRows.user(session.principal, row).get() }
        return (session, stored, user)
    }

    /// Revokes the session `token` names; `false` when there is no live one (unknown, revoked,
    /// expired, or a check that does not match: then nothing is deleted).
    public func revokeSession(token: String, now: Int64) async throws(PostgresStoreError) -> Bool {
        guard let (id, check) = SessionToken.digest(token) else { return false }
        return try await revoke(id, check: check, now: now)
    }

    /// Revokes session `id`; `false` when there is no live one.
    public func revokeSession(id: SessionID, now: Int64) async throws(PostgresStoreError) -> Bool {
        try await revoke(id, check: nil, now: now)
    }

    private func revoke(_ id: SessionID, check: SessionCheck?, now: Int64) async throws(PostgresStoreError) -> Bool {
        let sessions = table("sessions"), logger = self.logger
        defer { forget(SessionCacheState.sessionKey(id)) }
        let outcome = try await transaction("revoking a session") { connection -> Result<Bool, PostgresStoreError> in
            // Read under a row lock and compared here, in constant time, before anything is deleted.
            let rows = try await connection.query(
                PostgresQuery(unsafeSQL: "SELECT \(PostgresRows.sessionColumns) FROM \(sessions) WHERE id = $1 FOR UPDATE", binds: Self.binds(id.bytes)),
                logger: logger)
            var found: PostgresRows.SessionRow?
            for try await row in rows.decode(PostgresRows.SessionRow.self) { found = row }
            guard let found else { return .success(false) }
            let read = PostgresRows.session(id: id, found)
            guard case .success(let (session, stored)) = read else { return read.map { _ in false } }
            if let check, !stored.matches(check) { return .success(false) }
            try await connection.query(PostgresQuery(unsafeSQL: "DELETE FROM \(sessions) WHERE id = $1", binds: Self.binds(id.bytes)), logger: logger)
            try await self.notify("s:" + PostgresRows.hex(id.bytes), on: connection)
            return .success(now < session.endsAt)
        }
        return try outcome.get()
    }

    /// Revokes every session of `principal`; returns how many were live.
    public func revokeSessions(of principal: Principal, now: Int64) async throws(PostgresStoreError) -> Int {
        defer { forget(PostgresRows.userKey(principal)) }
        return try await transaction("revoking a user's sessions") { connection in
            let (any, live) = try await self.deleteSessions(of: principal, now: now, on: connection)
            if any { try await self.notify(PostgresRows.userKey(principal), on: connection) }
            return live
        }
    }

    /// Deletes every session of `principal` in the transaction `connection` is in: whether there was
    /// any, and how many were live.
    func deleteSessions(of principal: Principal, now: Int64, on connection: PostgresConnection) async throws -> (any: Bool, live: Int) {
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    DELETE FROM \(table("sessions")) WHERE id IN (SELECT id FROM \(table("sessions")) WHERE issuer = $1 AND sub = $2 ORDER BY id FOR UPDATE)
                    RETURNING least(expires_at, last_seen_at + idle_seconds)
                    """,
                binds: Self.binds(principal)),
            logger: logger)
        var live = 0, any = false
        for try await endsAt in rows.decode(Int64.self) {
            any = true
            if now < endsAt { live += 1 }
        }
        return (any, live)
    }

    /// The live sessions of `principal`, oldest first.
    public func sessions(of principal: Principal, now: Int64) async throws(PostgresStoreError) -> [Session] {
        let sessions = table("sessions")
        let rows = try await read("listing a user's sessions") { client -> [(ByteBuffer, PostgresRows.SessionRow)] in
            let rows = try await client.query(
                PostgresQuery(
                    unsafeSQL: """
                        SELECT id, \(PostgresRows.sessionColumns) FROM \(sessions) WHERE issuer = $1 AND sub = $2
                        AND expires_at > $3 AND last_seen_at + idle_seconds > $3 ORDER BY created_at, id
                        """,
                    binds: Self.binds(principal, now)))
            var found: [(ByteBuffer, PostgresRows.SessionRow)] = []
            for try await (id, c, i, s, created, expires, seen, idle, data) in rows.decode(
                (ByteBuffer, ByteBuffer, ByteBuffer, ByteBuffer, Int64, Int64, Int64, Int32, ByteBuffer?).self)
            {
                found.append((id, (c, i, s, created, expires, seen, idle, data)))
            }
            return found
        }
        var live: [Session] = []
        for (idBytes, row) in rows {
            guard let id = SessionID(bytes: idBytes.readableBytesView) else {
                throw .corrupt("a session id of \(idBytes.readableBytes) bytes, not 16")
            }
            live.append(try PostgresRows.session(id: id, row).get().0)
        }
        return live
    }

    static func binds(_ bytes: [UInt8]) -> PostgresBindings {
        var binds = PostgresBindings()
        binds.append(PostgresRows.bytes(bytes))
        return binds
    }

    static func binds(_ principal: Principal, _ now: Int64? = nil) -> PostgresBindings {
        var binds = PostgresBindings()
        binds.append(PostgresRows.bytes(principal.issuer))
        binds.append(PostgresRows.bytes(principal.sub))
        if let now { binds.append(now) }
        return binds
    }
}

extension PostgresStore {
    /// A session idle past its timeout is removed only this long after: another host's use of it may
    /// not be written yet (uses are written with each heartbeat, well within this).
    public static let idleGrace: Int64 = 300

    /// Removes up to `limit` expired rows of each kind: sessions past their expiry (or idle past
    /// their timeout and `idleGrace`), seen notifications and pending web authorizations past
    /// theirs. Returns how many rows went.
    public func pruneExpired(now: Int64, limit: Int) async throws(PostgresStoreError) -> Int {
        let sessions = table("sessions"), seen = table("apple_notifications_seen"), pending = table("apple_pending")
        let logger = self.logger, grace = Self.idleGrace
        return try await transaction("removing expired rows") { connection in
            var removed = 0
            var expiry = PostgresBindings()
            expiry.append(now)
            expiry.append(limit)
            var idle = expiry
            idle.append(grace)
            for (sql, binds) in [
                (
                    """
                    DELETE FROM \(sessions) WHERE id IN (SELECT id FROM \(sessions)
                        WHERE expires_at <= $1 OR last_seen_at + idle_seconds + $3 <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED)
                    """, idle
                ),
                ("DELETE FROM \(seen) WHERE jti IN (SELECT jti FROM \(seen) WHERE expires_at <= $1 LIMIT $2)", expiry),
                ("DELETE FROM \(pending) WHERE state_hash IN (SELECT state_hash FROM \(pending) WHERE expires_at <= $1 LIMIT $2)", expiry),
            ] {
                let rows = try await connection.query(PostgresQuery(unsafeSQL: sql + " RETURNING 1", binds: binds), logger: logger)
                for try await _ in rows { removed += 1 }
            }
            return removed
        }
    }
}
