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
        let outbox = table("outbox"), ids = table("outbox_ids"), logger = self.logger
        var json = ByteBuffer()
        JSONValue.object(payload).write(to: &json)
        let bytes = json
        let id = try await transaction("adding outbox work") { connection -> Int64 in
            var binds = PostgresBindings()
            binds.append(kind)
            binds.append(now)
            binds.append(bytes)
            let rows = try await connection.query(
                PostgresQuery(
                    unsafeSQL: """
                        INSERT INTO \(outbox) (id, kind, created_at, payload, next_attempt_at) VALUES (nextval('\(ids)'), $1, $2, $3, $2)
                        RETURNING id
                        """,
                    binds: binds),
                logger: logger)
            var id: Int64 = 0
            for try await value in rows.decode(Int64.self) { id = value }
            return id
        }
        return OutboxEntry(id: UInt64(bitPattern: id), kind: kind, createdAt: now, payload: payload)
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
            guard case .object(let members)? = try? JSONValue.parse(payload) else {
                throw .corrupt("outbox entry \(id): its payload is not a JSON object")
            }
            work.append(ClaimedWork(entry: OutboxEntry(id: UInt64(bitPattern: id), kind: kind, createdAt: createdAt, payload: members), attempts: Int(attempts)))
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
