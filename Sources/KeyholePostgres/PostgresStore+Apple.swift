import KeyholeProtocol
import KeyholeStore
import NIOCore
import PostgresNIO

/// What Sign in with Apple changes besides sessions (`AppleStoring`): each change one transaction
/// holding the user's row (`FOR UPDATE`), so that two hosts applying a notification, a refresh
/// check or a transfer to one user go one after the other, each seeing the other's result.
extension PostgresStore {
    /// Changes `principal`'s record with `update` when they have one; see `AppleStoring.modifyUser`.
    public func modifyUser(
        _ principal: Principal, now: Int64, revokeSessions: Bool, _ update: @escaping @Sendable (inout User) -> Bool
    ) async throws(PostgresStoreError) -> (user: User, applied: Bool, sessions: Int)? {
        defer { forget(PostgresRows.userKey(principal)) }
        let outcome = try await transaction("changing a user") { connection -> Result<(User, Bool, Int)?, PostgresStoreError> in
            let before: User
            switch try await self.lockedUser(principal, on: connection) {
            case .success(nil): return .success(nil)
            case .success(let user?): before = user
            case .failure(let error): return .failure(error)
            }
            var user = before
            guard update(&user) else { return .success((before, false, 0)) }
            var live = 0, changed = false
            if revokeSessions {
                let removed = try await self.deleteSessions(of: principal, now: now, on: connection)
                (live, changed) = (removed.live, removed.any)
            }
            if user != before {
                user.updatedAt = max(now, user.createdAt)
                try await self.writeUser(user, on: connection)
                changed = true
            }
            if changed { try await self.notify(PostgresRows.userKey(principal), on: connection) }
            return .success((user, true, live))
        }
        return try outcome.get()
    }

    /// Moves `from`'s record and sessions to `to`; see `AppleStoring.moveUser`. Every session of
    /// `from` moves (an idle-looking one may have been used on another host, not yet written);
    /// the count is of the live ones.
    public func moveUser(
        _ from: Principal, to: Principal, now: Int64, adjust: @escaping @Sendable (inout User) -> Void
    ) async throws(PostgresStoreError) -> (user: User?, sessions: Int)? {
        guard from != to else { return nil }
        let users = table("users"), sessions = table("sessions"), logger = self.logger
        defer {
            forget(PostgresRows.userKey(from))
            forget(PostgresRows.userKey(to))
        }
        let outcome = try await transaction("moving a user") { connection -> Result<(User?, Int)?, PostgresStoreError> in
            // Both rows locked in one order, so that two opposite moves (or a batch of creates) cannot deadlock.
            let first = PostgresRows.locksBefore(from, to) ? from : to, second = first == from ? to : from
            var locked: [Principal: User] = [:]
            for principal in [first, second] {
                switch try await self.lockedUser(principal, on: connection) {
                case .success(let user?): locked[principal] = user
                case .success(nil): break
                case .failure(let error): return .failure(error)
                }
            }
            var binds = Self.binds(from, now)
            binds.append(PostgresRows.bytes(to.issuer))
            binds.append(PostgresRows.bytes(to.sub))
            let moved = try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        UPDATE \(sessions) SET issuer = $4, sub = $5
                        WHERE id IN (SELECT id FROM \(sessions) WHERE issuer = $1 AND sub = $2 ORDER BY id FOR UPDATE)
                        RETURNING expires_at > $3 AND last_seen_at + idle_seconds > $3
                        """,
                    binds: binds),
                logger: logger)
            var live = 0
            for try await isLive in moved.decode(Bool.self) where isLive { live += 1 }
            guard let user = locked[from] else {
                // Neither record nor live session: nothing moved, as the local store answers (expired
                // rows that went along are the pruner's).
                guard live > 0 else { return .success(nil) }
                try await self.notify(PostgresRows.userKey(from), on: connection)
                return .success((locked[to], live))
            }
            var result = locked[to] ?? User(principal: to, createdAt: user.createdAt, updatedAt: now)
            result.fields.merge(user.fields) { kept, _ in kept }
            result.createdAt = min(result.createdAt, user.createdAt)
            result.lastLoginAt = [result.lastLoginAt, user.lastLoginAt].compactMap { $0 }.max()
            adjust(&result)
            result.updatedAt = max(now, result.createdAt)
            if locked[to] == nil {
                try await self.insertUser(result, on: connection)
            } else {
                try await self.writeUser(result, on: connection)
            }
            try await connection.query(
                PostgresQuery(unsafeSQL: "DELETE FROM \(users) WHERE issuer = $1 AND sub = $2", binds: Self.binds(from)), logger: logger)
            try await self.notify(PostgresRows.userKey(from), on: connection)
            try await self.notify(PostgresRows.userKey(to), on: connection)
            return .success((result, live))
        }
        return try outcome.get()
    }

    /// Deletes `principal` when `condition` accepts their record, adding `work`'s outbox entry in the
    /// same transaction; see `AppleStoring.deleteUser(_:now:when:outbox:)`.
    public func deleteUser(
        _ principal: Principal, now: Int64, when condition: @escaping @Sendable (User?) -> Bool,
        outbox work: @escaping @Sendable (User) -> Store.OutboxWork?
    ) async throws(PostgresStoreError) -> (deleted: Bool, sessions: Int, outbox: OutboxEntry?) {
        let users = table("users"), logger = self.logger
        defer { forget(PostgresRows.userKey(principal)) }
        let outcome = try await transaction("deleting a user") { connection -> Result<(Bool, Int, OutboxEntry?), PostgresStoreError> in
            // The row locked before it is judged: a notification or sign-in on another host waits.
            let user: User?
            switch try await self.lockedUser(principal, on: connection) {
            case .success(let found): user = found
            case .failure(let error): return .failure(error)
            }
            guard condition(user) else { return .success((false, 0, nil)) }
            if user != nil {
                try await connection.query(
                    PostgresQuery(unsafeSQL: "DELETE FROM \(users) WHERE issuer = $1 AND sub = $2", binds: Self.binds(principal)),
                    logger: logger)
            }
            let sessions = try await self.deleteSessions(of: principal, now: now, on: connection)
            guard user != nil || sessions.any else { return .success((false, 0, nil)) }
            var entry: OutboxEntry?
            if let user, let work = work(user) {
                let id = try await self.insertOutbox(kind: work.kind, payload: work.payload, now: now, on: connection)
                entry = OutboxEntry(id: UInt64(bitPattern: id), kind: work.kind, createdAt: now, payload: work.payload)
            }
            try await self.notify(PostgresRows.userKey(principal), on: connection)
            return .success((true, sessions.live, entry))
        }
        return try outcome.get()
    }

    /// Up to `limit` users of `issuer` after `cursor`, in the order of their subs' bytes.
    public func users(of issuer: String, from cursor: UserCursor?, limit: Int) async throws(PostgresStoreError) -> (users: [User], next: UserCursor?) {
        let users = table("users")
        var after: [UInt8]?
        if case .after(let sub)? = cursor { after = sub }
        let start = after
        let rows = try await read("walking users") { client -> [(ByteBuffer, PostgresRows.UserRow)] in
            var binds = PostgresBindings()
            binds.append(PostgresRows.bytes(issuer))
            binds.append(limit)
            var condition = ""
            if let start {
                binds.append(PostgresRows.bytes(start))
                condition = "AND sub > $3"
            }
            let rows = try await client.query(
                PostgresQuery(
                    unsafeSQL: "SELECT sub, \(PostgresRows.userColumns) FROM \(users) WHERE issuer = $1 \(condition) ORDER BY sub LIMIT $2",
                    binds: binds))
            var found: [(ByteBuffer, PostgresRows.UserRow)] = []
            for try await (sub, created, updated, login, fields) in rows.decode((ByteBuffer, Int64, Int64, Int64?, ByteBuffer).self) {
                found.append((sub, (created, updated, login, fields)))
            }
            return found
        }
        var page: [User] = []
        for (sub, row) in rows {
            guard let principal = PostgresRows.principal(issuer: PostgresRows.bytes(issuer), sub: sub) else {
                throw .corrupt("a user of \(issuer) whose sub keyholed could not have written")
            }
            page.append(try PostgresRows.user(principal, row).get())
        }
        guard rows.count >= limit, let last = rows.last else { return (page, nil) }
        return (page, .after(sub: Array(last.0.readableBytesView)))
    }
}

extension PostgresStore {
    /// `principal`'s record read under a row lock held to the end of the transaction.
    func lockedUser(_ principal: Principal, on connection: PostgresConnection) async throws -> Result<User?, PostgresStoreError> {
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: "SELECT \(PostgresRows.userColumns) FROM \(table("users")) WHERE issuer = $1 AND sub = $2 FOR UPDATE",
                binds: Self.binds(principal)),
            logger: logger)
        var found: PostgresRows.UserRow?
        for try await row in rows.decode(PostgresRows.UserRow.self) { found = row }
        guard let found else { return .success(nil) }
        return PostgresRows.user(principal, found).map { $0 }
    }

    /// Writes `user` over its row.
    func writeUser(_ user: User, on connection: PostgresConnection) async throws {
        try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    UPDATE \(table("users")) SET created_at = $3, updated_at = $4, last_login_at = $5, fields = $6, revision = revision + 1
                    WHERE issuer = $1 AND sub = $2
                    """,
                binds: Self.userBinds(user)),
            logger: logger)
    }

    /// Writes `user` as a new row.
    func insertUser(_ user: User, on connection: PostgresConnection) async throws {
        try await connection.query(
            PostgresQuery(
                unsafeSQL: "INSERT INTO \(table("users")) (issuer, sub, \(PostgresRows.userColumns), revision) VALUES ($1, $2, $3, $4, $5, $6, 0)",
                binds: Self.userBinds(user)),
            logger: logger)
    }

    /// issuer, sub, created_at, updated_at, last_login_at, fields: as `writeUser` and `insertUser` bind them.
    static func userBinds(_ user: User) -> PostgresBindings {
        var binds = binds(user.principal)
        binds.append(user.createdAt)
        binds.append(user.updatedAt)
        binds.append(user.lastLoginAt)
        binds.append(PostgresRows.fields(user))
        return binds
    }
}
