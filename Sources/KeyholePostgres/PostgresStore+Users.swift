import KeyholeStore
import PostgresNIO

extension PostgresStore {
    /// `principal`'s user record, if they have one.
    public func user(_ principal: Principal) async throws(PostgresStoreError) -> User? {
        let users = table("users")
        let row = try await read("reading a user") { client -> PostgresRows.UserRow? in
            let rows = try await client.query(
                PostgresQuery(
                    unsafeSQL: "SELECT \(PostgresRows.userColumns) FROM \(users) WHERE issuer = $1 AND sub = $2", binds: Self.binds(principal)))
            var found: PostgresRows.UserRow?
            for try await row in rows.decode(PostgresRows.UserRow.self) { found = row }
            return found
        }
        return try row.map { row throws(PostgresStoreError) in try PostgresRows.user(principal, row).get() }
    }

    /// Changes `principal`'s record with `update`, creating it first when missing, under a row lock
    /// (two hosts updating one user apply one after the other: the row is made, if missing, before
    /// it is locked, so that two first updates cannot both start from nothing). Returns the record
    /// and whether it was created. Nothing is written when `update` changes an existing record not.
    public func updateUser(
        _ principal: Principal, now: Int64, _ update: @escaping @Sendable (inout User) -> Void
    ) async throws(PostgresStoreError) -> (user: User, created: Bool) {
        let result = try await transaction("updating a user") { connection in
            try await self.upsertUser(principal, now: now, login: false, on: connection, update)
        }
        forget(PostgresRows.userKey(principal))
        return result
    }

    /// A sign-in: `updateUser`'s change and a new session of the user's (its last login stamped, as a
    /// session.create stamps it), in one transaction: both committed, or neither. The record after,
    /// whether it was made, and the session with its token.
    public func signIn(
        _ principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?, _ update: @escaping @Sendable (inout User) -> Void
    ) async throws(PostgresStoreError) -> (user: User, created: Bool, token: String, session: Session) {
        let sessions = table("sessions"), logger = self.logger
        // Every failure throws, so that the transaction is rolled back: no record changed without its session.
        let signedIn = try await transaction("signing in") { connection -> (User, Bool, String, Session) in
            let (user, created) = try await self.upsertUser(principal, now: now, login: true, on: connection, update)
            // A repeated id needs a repeated 128-bit hash prefix: retrying is for form's sake.
            for _ in 0..<3 {
                guard let (token, id, check) = SessionToken.generate() else { throw PostgresStoreError.unavailable("the random number generator failed") }
                let session = Session(
                    id: id, principal: principal, createdAt: now, expiresAt: now + ttl, lastSeenAt: now, idleSeconds: idle, data: data)
                var binds = Self.binds(id.bytes)
                binds.append(PostgresRows.bytes(check.bytes))
                binds.append(PostgresRows.bytes(principal.issuer))
                binds.append(PostgresRows.bytes(principal.sub))
                binds.append(now)
                binds.append(session.expiresAt)
                binds.append(Int32(clamping: idle))
                binds.append(data.map { PostgresRows.bytes($0) })
                let inserted = try await connection.query(
                    PostgresQuery(
                        unsafeSQL: """
                            INSERT INTO \(sessions) (id, \(PostgresRows.sessionColumns)) VALUES ($1, $2, $3, $4, $5, $6, $5, $7, $8)
                            ON CONFLICT (id) DO NOTHING RETURNING 1
                            """,
                        binds: binds),
                    logger: logger)
                var taken = true
                for try await _ in inserted { taken = false }
                if !taken { return (user, created, token, session) }
            }
            throw PostgresStoreError.unavailable("could not find an unused session id")
        }
        forget(PostgresRows.userKey(principal))
        return signedIn
    }

    /// Deletes `principal`'s record and every session of theirs, in one transaction. Returns whether
    /// there was anything (a record or a session) and how many live sessions went.
    public func deleteUser(_ principal: Principal, now: Int64) async throws(PostgresStoreError) -> (deleted: Bool, sessions: Int) {
        let users = table("users"), logger = self.logger
        defer { forget(PostgresRows.userKey(principal)) }
        return try await transaction("deleting a user") { connection in
            // The user's row first: a session.create upserts it first too, so the two go one after
            // the other, and no session made meanwhile outlives the deletion.
            let record = try await connection.query(
                PostgresQuery(unsafeSQL: "DELETE FROM \(users) WHERE issuer = $1 AND sub = $2 RETURNING 1", binds: Self.binds(principal)),
                logger: logger)
            var any = false
            for try await _ in record { any = true }
            let sessions = try await self.deleteSessions(of: principal, now: now, on: connection)
            any = any || sessions.any
            if any { try await self.notify(PostgresRows.userKey(principal), on: connection) }
            return (any, sessions.live)
        }
    }

    /// In a transaction: `principal`'s row made if missing, then locked and read, and changed by
    /// `update`: written, with a notification to every host, when made or changed. With `login`, its
    /// last login is stamped at `now` (never moved back) without moving updated_at; a stamp alone is
    /// written as session.create writes it, with no new revision and no notification (a cached copy
    /// showing an older last login is what creates leave too). The record after and whether it was
    /// made; every failure throws, so that the transaction is rolled back.
    private func upsertUser(
        _ principal: Principal, now: Int64, login: Bool, on connection: PostgresConnection, _ update: (inout User) -> Void
    ) async throws -> (User, Bool) {
        let users = table("users")
        var made = Self.binds(principal)
        made.append(now)
        made.append(PostgresRows.bytes("{}"))
        let inserted = try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    INSERT INTO \(users) (issuer, sub, \(PostgresRows.userColumns), revision) VALUES ($1, $2, $3, $3, NULL, $4, 0)
                    ON CONFLICT (issuer, sub) DO NOTHING RETURNING 1
                    """,
                binds: made),
            logger: logger)
        var created = false
        for try await _ in inserted { created = true }
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: "SELECT \(PostgresRows.userColumns) FROM \(users) WHERE issuer = $1 AND sub = $2 FOR UPDATE",
                binds: Self.binds(principal)),
            logger: logger)
        var found: PostgresRows.UserRow?
        for try await row in rows.decode(PostgresRows.UserRow.self) { found = row }
        guard let found else { throw PostgresStoreError.corrupt("user \(principal): its row went between insert and lock") }
        var user = try PostgresRows.user(principal, found).get()
        let before = user
        update(&user)
        let changed = user != before
        if changed { user.updatedAt = max(now, user.createdAt) }
        if login { user.lastLoginAt = max(user.lastLoginAt ?? now, now) }
        if created || changed {
            try await self.writeUser(user, on: connection)
            try await self.notify(PostgresRows.userKey(principal), on: connection)
        } else if user.lastLoginAt != before.lastLoginAt {
            try await connection.query(
                PostgresQuery(
                    unsafeSQL: "UPDATE \(users) SET last_login_at = greatest(last_login_at, $3) WHERE issuer = $1 AND sub = $2",
                    binds: Self.binds(principal, now)),
                logger: logger)
        }
        return (user, created)
    }
}
