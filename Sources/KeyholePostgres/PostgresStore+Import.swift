import KeyholeProtocol
import KeyholeStore
import NIOCore
import PostgresNIO

extension PostgresStore {
    /// What copying one batch found: rows added, and rows whose key was there already (left as they
    /// were: a batch copied before an interruption, or a row this database changed since).
    public struct ImportCount: Sendable, Equatable, CustomStringConvertible {
        /// Rows added.
        public var copied: Int
        /// Rows not added, their key being there already.
        public var present: Int

        public init(copied: Int = 0, present: Int = 0) {
            self.copied = copied
            self.present = present
        }

        public static func + (lhs: ImportCount, rhs: ImportCount) -> ImportCount {
            ImportCount(copied: lhs.copied + rhs.copied, present: lhs.present + rhs.present)
        }

        public var description: String { "\(copied) copied, \(present) already there" }
    }

    /// Adds `users` as they are (times, fields and all) in one transaction, within `limit`; a user
    /// whose key is there already is left alone (POSTGRES.md, "From one host to several"). The
    /// fields are written by `PostgresRows.fields`, as every other write of them.
    public func importUsers(_ users: [User], within limit: Duration) async throws(PostgresStoreError) -> ImportCount {
        guard !users.isEmpty else { return ImportCount() }
        var binds = PostgresBindings()
        binds.append(users.map { PostgresRows.bytes($0.principal.issuer) })
        binds.append(users.map { PostgresRows.bytes($0.principal.sub) })
        binds.append(users.map(\.createdAt))
        binds.append(users.map(\.updatedAt))
        // No NULL in a bound array: whether there is a last login, and its time (0 when not).
        binds.append(users.map { $0.lastLoginAt != nil })
        binds.append(users.map { $0.lastLoginAt ?? 0 })
        binds.append(users.map(PostgresRows.fields))
        let sql = """
            INSERT INTO \(table("users")) (issuer, sub, \(PostgresRows.userColumns), revision)
            SELECT u.issuer, u.sub, u.created_at, u.updated_at, CASE WHEN u.has_login THEN u.login END, u.fields, 1
            FROM unnest($1::bytea[], $2::bytea[], $3::bigint[], $4::bigint[], $5::boolean[], $6::bigint[], $7::bytea[])
                AS u(issuer, sub, created_at, updated_at, has_login, login, fields)
            ON CONFLICT (issuer, sub) DO NOTHING RETURNING 1
            """
        return try await insert(users.count, sql, binds, doing: "copying users", within: limit)
    }

    /// Adds `sessions` with their ids, checks, times, idle timeouts, data and last uses, in one
    /// transaction, within `limit`: their tokens go on working. A session whose id is there
    /// already is left alone.
    package func importSessions(_ sessions: [Store.ExportedSession], within limit: Duration) async throws(PostgresStoreError) -> ImportCount {
        guard !sessions.isEmpty else { return ImportCount() }
        var binds = PostgresBindings()
        binds.append(sessions.map { PostgresRows.bytes($0.session.id.bytes) })
        binds.append(sessions.map { PostgresRows.bytes($0.check.bytes) })
        binds.append(sessions.map { PostgresRows.bytes($0.session.principal.issuer) })
        binds.append(sessions.map { PostgresRows.bytes($0.session.principal.sub) })
        binds.append(sessions.map(\.session.createdAt))
        binds.append(sessions.map(\.session.expiresAt))
        binds.append(sessions.map(\.session.lastSeenAt))
        // As createSession binds it: the protocol keeps idle_s far below 2^31.
        binds.append(sessions.map { Int32(clamping: $0.session.idleSeconds) })
        binds.append(sessions.map { $0.session.data != nil })
        binds.append(sessions.map { PostgresRows.bytes($0.session.data ?? []) })
        let sql = """
            INSERT INTO \(table("sessions")) (id, \(PostgresRows.sessionColumns))
            SELECT s.id, s.check_bytes, s.issuer, s.sub, s.created_at, s.expires_at, s.last_seen_at, s.idle_seconds,
                   CASE WHEN s.has_data THEN s.data END
            FROM unnest($1::bytea[], $2::bytea[], $3::bytea[], $4::bytea[], $5::bigint[], $6::bigint[], $7::bigint[],
                        $8::integer[], $9::boolean[], $10::bytea[])
                AS s(id, check_bytes, issuer, sub, created_at, expires_at, last_seen_at, idle_seconds, has_data, data)
            ON CONFLICT (id) DO NOTHING RETURNING 1
            """
        return try await insert(sessions.count, sql, binds, doing: "copying sessions", within: limit)
    }

    /// Adds outbox `entries` under their own ids (the local store's random 64 bits, as a bigint of the
    /// same bits: `UInt64(bitPattern:)` gives them back), due at once and leased by no host, in one
    /// transaction, within `limit`. An entry whose id is there already is left alone. `outbox_ids`
    /// is not advanced: POSTGRES.md, "From one host to several", says why.
    public func importOutbox(_ entries: [OutboxEntry], within limit: Duration) async throws(PostgresStoreError) -> ImportCount {
        guard !entries.isEmpty else { return ImportCount() }
        var binds = PostgresBindings()
        binds.append(entries.map { Int64(bitPattern: $0.id) })
        binds.append(entries.map(\.kind))
        binds.append(entries.map(\.createdAt))
        binds.append(
            entries.map { entry in
                var json = ByteBuffer()
                JSONValue.object(entry.payload).write(to: &json)
                return json
            })
        let sql = """
            INSERT INTO \(table("outbox")) (id, kind, created_at, payload, next_attempt_at)
            SELECT o.id, o.kind, o.created_at, o.payload, o.created_at
            FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bytea[]) AS o(id, kind, created_at, payload)
            ON CONFLICT (id) DO NOTHING RETURNING 1
            """
        return try await insert(entries.count, sql, binds, doing: "copying outbox entries", within: limit)
    }

    /// Tells every host's listener to drop everything it caches (`*`): rows appeared that no
    /// notification named.
    public func notifyEverything(within limit: Duration) async throws(PostgresStoreError) {
        try await transaction("notifying every host", within: limit) { connection in try await self.notify("*", on: connection) }
    }

    /// One multi-row `INSERT … ON CONFLICT DO NOTHING RETURNING 1` of `count` rows, its own
    /// transaction: a batch is copied whole or not at all.
    private func insert(
        _ count: Int, _ sql: String, _ binds: PostgresBindings, doing: String, within limit: Duration
    ) async throws(PostgresStoreError) -> ImportCount {
        let logger = self.logger
        let copied = try await transaction(doing, within: limit) { connection in
            let rows = try await connection.query(PostgresQuery(unsafeSQL: sql, binds: binds), logger: logger)
            var copied = 0
            for try await _ in rows { copied += 1 }
            return copied
        }
        return ImportCount(copied: copied, present: count - copied)
    }
}
