import KeyholeStore
import NIOCore
import PostgresNIO

extension PostgresStore {
    /// A use's 60 s after the row's last use: due whatever the row's deadline (the local store's
    /// touch interval, and what a host that dies may lose).
    static let touchInterval: Int64 = 60

    /// How near the row's idle deadline a use is due (POSTGRES.md, "Reads"): a heartbeat (within
    /// `max_staleness`), two statements' bounds (the heartbeat's, then the write's), a second for
    /// times kept in whole seconds, and 10 s for hosts' clocks.
    var touchMargin: Int64 {
        Int64((Self.seconds(configuration.maxStaleness) + 2 * Self.seconds(configuration.timeout)).rounded(.up)) + 11
    }

    /// Uses written per statement at most: a shutdown's, or a backlog's, in several.
    static let touchesPerStatement = 5000

    /// Writes the uses recorded that are due (`all`: every one), never moving a last use back, in
    /// statements of at most `touchesPerStatement`. What fails to be written is kept for the next call.
    func writeTouches(all: Bool = false) async {
        let now = Int64(self.now().rounded(.down)), margin = touchMargin
        let batch = pendingTouches.withLock { pending -> [SessionID: PendingUse] in
            guard !all else {
                defer { pending.removeAll(keepingCapacity: true) }
                return pending
            }
            var due: [SessionID: PendingUse] = [:]
            for (id, use) in pending where use.isDue(now: now, margin: margin) { due[id] = use }
            for id in due.keys { pending[id] = nil }
            return due
        }
        guard !batch.isEmpty else { return }
        let uses = Array(batch)
        for start in stride(from: 0, to: uses.count, by: Self.touchesPerStatement) {
            let chunk = uses[start..<min(start + Self.touchesPerStatement, uses.count)]
            do {
                try await writeUses(chunk)
            } catch {
                pendingTouches.withLock { pending in
                    for (id, use) in chunk { pending.record(use, for: id) }
                }
                logger.debug("postgres.touches_failed", metadata: ["error": "\(error)"])
            }
        }
    }

    /// One statement writing `uses`, never moving a last use back; rows locked in id order first,
    /// as every statement locking several sessions' rows takes them.
    private func writeUses(_ uses: ArraySlice<(key: SessionID, value: PendingUse)>) async throws(PostgresStoreError) {
        let sessions = table("sessions")
        _ = try await read("writing sessions' last uses") { client in
            var binds = PostgresBindings()
            binds.append(uses.map { PostgresRows.bytes($0.key.bytes) })
            binds.append(uses.map { $0.value.used })
            try await client.query(
                PostgresQuery(
                    unsafeSQL: """
                        WITH locked AS MATERIALIZED (
                            SELECT s.id FROM \(sessions) s JOIN unnest($1::bytea[], $2::bigint[]) AS u(id, t) ON s.id = u.id
                            WHERE s.last_seen_at < u.t ORDER BY s.id FOR UPDATE OF s)
                        UPDATE \(sessions) SET last_seen_at = greatest(last_seen_at, u.t)
                        FROM unnest($1::bytea[], $2::bigint[]) AS u(id, t)
                        WHERE \(sessions).id = u.id AND \(sessions).id IN (SELECT id FROM locked)
                        """,
                    binds: binds))
        }
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
    /// not be written yet (a use is written before its row's idle deadline passes; this is margin to spare).
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
