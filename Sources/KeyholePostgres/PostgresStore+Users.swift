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
    /// (two hosts updating one user apply one after the other). Returns the record and whether it
    /// was created. Nothing is written when `update` changes nothing.
    public func updateUser(
        _ principal: Principal, now: Int64, _ update: @escaping @Sendable (inout User) -> Void
    ) async throws(PostgresStoreError) -> (user: User, created: Bool) {
        let users = table("users"), logger = self.logger
        let outcome = try await transaction("updating a user") { connection -> Result<(User, Bool), PostgresStoreError> in
            let rows = try await connection.query(
                PostgresQuery(
                    unsafeSQL: "SELECT \(PostgresRows.userColumns) FROM \(users) WHERE issuer = $1 AND sub = $2 FOR UPDATE",
                    binds: Self.binds(principal)),
                logger: logger)
            var found: PostgresRows.UserRow?
            for try await row in rows.decode(PostgresRows.UserRow.self) { found = row }
            var before: User?
            if let found {
                switch PostgresRows.user(principal, found) {
                case .success(let user): before = user
                case .failure(let error): return .failure(error)
                }
            }
            var user = before ?? User(principal: principal, createdAt: now, updatedAt: now)
            update(&user)
            guard user != before else { return .success((user, false)) }
            user.updatedAt = max(now, user.createdAt)
            var binds = Self.binds(principal)
            binds.append(user.createdAt)
            binds.append(user.updatedAt)
            binds.append(user.lastLoginAt)
            binds.append(PostgresRows.fields(user))
            try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        INSERT INTO \(users) (issuer, sub, \(PostgresRows.userColumns), revision) VALUES ($1, $2, $3, $4, $5, $6, 1)
                        ON CONFLICT (issuer, sub) DO UPDATE SET created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at,
                        last_login_at = EXCLUDED.last_login_at, fields = EXCLUDED.fields, revision = \(users).revision + 1
                        """,
                    binds: binds),
                logger: logger)
            if before != nil { try await self.notify(PostgresRows.userKey(principal), on: connection) }
            return .success((user, before == nil))
        }
        return try outcome.get()
    }

    /// Deletes `principal`'s record and every session of theirs, in one transaction. Returns whether
    /// there was anything (a record or a session) and how many live sessions went.
    public func deleteUser(_ principal: Principal, now: Int64) async throws(PostgresStoreError) -> (deleted: Bool, sessions: Int) {
        let users = table("users"), logger = self.logger
        return try await transaction("deleting a user") { connection in
            let sessions = try await self.deleteSessions(of: principal, now: now, on: connection)
            var any = sessions.any
            let live = sessions.live
            let record = try await connection.query(
                PostgresQuery(unsafeSQL: "DELETE FROM \(users) WHERE issuer = $1 AND sub = $2 RETURNING 1", binds: Self.binds(principal)),
                logger: logger)
            for try await _ in record { any = true }
            if any { try await self.notify(PostgresRows.userKey(principal), on: connection) }
            return (any, live)
        }
    }
}
