import KeyholeProtocol
import KeyholeStore
import NIOCore
import PostgresNIO

extension PostgresStore {
    /// An outbox entry this host holds a lease on (POSTGRES.md, "The Apple outbox across hosts").
    public struct ClaimedWork: Sendable, Equatable {
        public var entry: OutboxEntry
        /// How many times it was tried before this claim.
        public var attempts: Int

        public init(entry: OutboxEntry, attempts: Int) {
            self.entry = entry
            self.attempts = attempts
        }
    }

    /// Adds work that must happen at least once; it stays until a host completes it.
    public func addOutbox(kind: String, payload: [String: JSONValue], now: Int64) async throws(PostgresStoreError) -> OutboxEntry {
        let id = try await transaction("adding outbox work") { connection in
            try await self.insertOutbox(kind: kind, payload: payload, now: now, on: connection)
        }
        return OutboxEntry(id: UInt64(bitPattern: id), kind: kind, createdAt: now, payload: payload)
    }

    /// Inserts an outbox row in the transaction of `connection`, due at once; its id.
    func insertOutbox(kind: String, payload: [String: JSONValue], now: Int64, on connection: PostgresConnection) async throws -> Int64 {
        var json = ByteBuffer()
        JSONValue.object(payload).write(to: &json)
        var binds = PostgresBindings()
        binds.append(kind)
        binds.append(now)
        binds.append(json)
        let rows = try await connection.query(
            PostgresQuery(
                unsafeSQL: """
                    INSERT INTO \(table("outbox")) (id, kind, created_at, payload, next_attempt_at)
                    VALUES (nextval('\(table("outbox_ids"))'), $1, $2, $3, $2) RETURNING id
                    """,
                binds: binds),
            logger: logger)
        var id: Int64 = 0
        for try await value in rows.decode(Int64.self) { id = value }
        return id
    }

    /// Every entry of `kind`, oldest first, whoever holds it.
    public func outbox(kind: String) async throws(PostgresStoreError) -> [OutboxEntry] {
        let outbox = table("outbox")
        let rows = try await read("listing outbox work") { client -> [(Int64, Int64, ByteBuffer)] in
            let rows = try await client.query(
                PostgresQuery(unsafeSQL: "SELECT id, created_at, payload FROM \(outbox) WHERE kind = $1 ORDER BY created_at, id", binds: {
                    var binds = PostgresBindings()
                    binds.append(kind)
                    return binds
                }()))
            var found: [(Int64, Int64, ByteBuffer)] = []
            for try await row in rows.decode((Int64, Int64, ByteBuffer).self) { found.append(row) }
            return found
        }
        var entries: [OutboxEntry] = []
        for (id, createdAt, payload) in rows { entries.append(try Self.outboxEntry(id: id, kind: kind, createdAt: createdAt, payload: payload)) }
        return entries
    }

    /// Takes entry `id` for this host for `lease` seconds unless another host holds it or a failure
    /// put it off (this host may take again what it holds: its own tries are kept apart in memory).
    public func claimOutbox(_ id: UInt64, lease: Int64, now: Int64) async throws(PostgresStoreError) -> OutboxClaim {
        let outbox = table("outbox"), logger = self.logger, host = configuration.hostID
        return try await transaction("claiming outbox work") { connection -> OutboxClaim in
            var binds = PostgresBindings()
            binds.append(Int64(bitPattern: id))
            binds.append(host)
            binds.append(now)
            binds.append(now + lease)
            let claimed = try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        UPDATE \(outbox) SET lease_owner = $2, lease_until = $4
                        WHERE id = $1 AND next_attempt_at <= $3 AND (lease_until IS NULL OR lease_until <= $3 OR lease_owner = $2)
                        RETURNING id
                        """,
                    binds: binds),
                logger: logger)
            for try await _ in claimed { return .claimed }
            var key = PostgresBindings()
            key.append(Int64(bitPattern: id))
            let rows = try await connection.query(
                PostgresQuery(
                    unsafeSQL: "SELECT greatest(next_attempt_at, coalesce(lease_until, next_attempt_at)) FROM \(outbox) WHERE id = $1",
                    binds: key),
                logger: logger)
            for try await until in rows.decode(Int64.self) { return .busy(until: until) }
            return .gone
        }
    }

    static func outboxEntry(id: Int64, kind: String, createdAt: Int64, payload: ByteBuffer) throws(PostgresStoreError) -> OutboxEntry {
        guard case .object(let members)? = try? JSONValue.parse(payload) else {
            throw .corrupt("outbox entry \(id): its payload is not a JSON object")
        }
        return OutboxEntry(id: UInt64(bitPattern: id), kind: kind, createdAt: createdAt, payload: members)
    }

    /// Claims up to `limit` entries of `kind` that are due and not leased by a live lease, for
    /// `lease` seconds: another host's claim skips them (`FOR UPDATE SKIP LOCKED`, then the lease),
    /// so no two hosts work on one entry at the same moment. A host that dies loses its lease when
    /// it runs out, and another host takes the work.
    public func claimOutbox(kind: String, limit: Int, lease: Int64, now: Int64) async throws(PostgresStoreError) -> [ClaimedWork] {
        let outbox = table("outbox"), logger = self.logger, host = configuration.hostID
        let rows = try await transaction("claiming outbox work") { connection -> [(Int64, Int64, ByteBuffer, Int32)] in
            var binds = PostgresBindings()
            binds.append(host)
            binds.append(now)
            binds.append(now + lease)
            binds.append(kind)
            binds.append(limit)
            let rows = try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        UPDATE \(outbox) SET lease_owner = $1, lease_until = $3
                        WHERE id IN (SELECT id FROM \(outbox)
                                     WHERE kind = $4 AND next_attempt_at <= $2 AND (lease_until IS NULL OR lease_until <= $2)
                                     ORDER BY id FOR UPDATE SKIP LOCKED LIMIT $5)
                        RETURNING id, created_at, payload, attempts
                        """,
                    binds: binds),
                logger: logger)
            var claimed: [(Int64, Int64, ByteBuffer, Int32)] = []
            for try await row in rows.decode((Int64, Int64, ByteBuffer, Int32).self) { claimed.append(row) }
            return claimed
        }
        var work: [ClaimedWork] = []
        for (id, createdAt, payload, attempts) in rows.sorted(by: { $0.0 < $1.0 }) {
            work.append(ClaimedWork(entry: try Self.outboxEntry(id: id, kind: kind, createdAt: createdAt, payload: payload), attempts: Int(attempts)))
        }
        return work
    }

    /// The work is done: the entry goes, if this host is still its lease's owner (a lease that ran
    /// out and was claimed by another host is that host's now, and it does the work again: at least
    /// once). Returns whether it went.
    public func completeOutbox(_ id: UInt64) async throws(PostgresStoreError) -> Bool {
        let outbox = table("outbox"), logger = self.logger, host = configuration.hostID
        return try await transaction("completing outbox work") { connection in
            var binds = PostgresBindings()
            binds.append(Int64(bitPattern: id))
            binds.append(host)
            let rows = try await connection.query(
                PostgresQuery(unsafeSQL: "DELETE FROM \(outbox) WHERE id = $1 AND lease_owner = $2 RETURNING id", binds: binds),
                logger: logger)
            var deleted = false
            for try await _ in rows { deleted = true }
            return deleted
        }
    }

    /// The work failed: tried again after `retryAfter` seconds, by whichever host claims it then.
    public func failOutbox(_ id: UInt64, retryAfter: Int64, now: Int64) async throws(PostgresStoreError) {
        let outbox = table("outbox"), logger = self.logger, host = configuration.hostID
        _ = try await transaction("rescheduling outbox work") { connection in
            var binds = PostgresBindings()
            binds.append(Int64(bitPattern: id))
            binds.append(host)
            binds.append(now + retryAfter)
            try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        UPDATE \(outbox) SET attempts = attempts + 1, next_attempt_at = $3, lease_owner = NULL, lease_until = NULL
                        WHERE id = $1 AND lease_owner = $2
                        """,
                    binds: binds),
                logger: logger)
        }
    }
}
