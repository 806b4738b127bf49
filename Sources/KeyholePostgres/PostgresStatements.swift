import NIOCore
import PostgresNIO

/// The statements of the hot paths, run in batches (`StatementBatcher`): `session.get`'s cache
/// misses and `session.create`s. Each is prepared once on each of its batch connections, so that
/// PostgreSQL parses it once, and it is planned once (`plan_cache_mode = force_generic_plan`).
///
/// A prepared statement's SQL is fixed for the process, and the schema is configuration, so these
/// name their tables without a schema: every batch connection sets `search_path` to the schema when
/// it starts (`PostgresStore.startupParameters(for:)`) and checks `current_schema()` before
/// preparing (`BatchConnection`).
enum PostgresStatements {
    /// Sessions and their users' records by the sessions' ids ($1, bytea[]). One row per session
    /// found.
    static let readSessions = """
        SELECT s.id, s.check_bytes, s.issuer, s.sub, s.created_at, s.expires_at, s.last_seen_at, s.idle_seconds, s.data,
               u.created_at, u.updated_at, u.last_login_at, u.fields
        FROM sessions s LEFT JOIN users u ON u.issuer = s.issuer AND u.sub = s.sub WHERE s.id = ANY($1::bytea[])
        """

    /// Sign-ins' users made or their logins stamped (never moved back): $1 issuers, $2 subs, $3
    /// times, one row per user (PostgreSQL refuses to change a row twice in one statement), in the
    /// order given, which is the order their locks are taken in (`PostgresRows.locksBefore`); then,
    /// in the same statement and so the same transaction, new sessions: $4 ids, $5 checks, $6
    /// issuers, $7 subs, $8 creation times, $9 expiries, $10 idle timeouts, $11 data, $12 whether
    /// each has data (NULL otherwise: postgres-nio sends no array of optionals). The ids of the
    /// sessions inserted come back (an id already there inserts nothing).
    static let createSessions = """
        WITH stamped AS (
            INSERT INTO users (issuer, sub, created_at, updated_at, last_login_at, fields, revision)
            SELECT u.issuer, u.sub, u.t, u.t, u.t, '\\x7b7d'::bytea, 1
            FROM unnest($1::bytea[], $2::bytea[], $3::bigint[]) WITH ORDINALITY AS u(issuer, sub, t, n) ORDER BY u.n
            ON CONFLICT (issuer, sub) DO UPDATE SET last_login_at = greatest(users.last_login_at, EXCLUDED.last_login_at)
            RETURNING 1)
        INSERT INTO sessions (id, check_bytes, issuer, sub, created_at, expires_at, last_seen_at, idle_seconds, data)
        SELECT u.id, u.c, u.i, u.s, u.t, u.e, u.t, u.idle, CASE WHEN u.has THEN u.d END
        FROM unnest($4::bytea[], $5::bytea[], $6::bytea[], $7::bytea[], $8::bigint[], $9::bigint[], $10::integer[], $11::bytea[], $12::boolean[])
            AS u(id, c, i, s, t, e, idle, d, has)
        ON CONFLICT (id) DO NOTHING RETURNING id
        """

    /// The cells of a row these statements return, read in order. As binary, by hand: postgres-nio
    /// (1.33) asks for binary results on its EventLoopFuture interface's prepared statements but
    /// labels their columns with the statement's described format, text; and a bytea or an
    /// integer needs no more (measured: decoding through postgres-nio was two fifths of the work
    /// of answering a batch).
    struct Cells {
        private var cells: PostgresRow.Iterator

        init(_ row: PostgresRow) { cells = row.makeIterator() }

        /// The next cell's bytes; nil for NULL.
        mutating func bytes() throws(PostgresStoreError) -> ByteBuffer? {
            guard let cell = cells.next() else { throw .corrupt("a row of fewer columns than its statement's") }
            return cell.bytes
        }

        mutating func int64() throws(PostgresStoreError) -> Int64? {
            guard var bytes = try bytes() else { return nil }
            guard bytes.readableBytes == 8, let value = bytes.readInteger(as: Int64.self) else { throw .corrupt("a bigint of \(bytes.readableBytes) bytes") }
            return value
        }

        mutating func int32() throws(PostgresStoreError) -> Int32? {
            guard var bytes = try bytes() else { return nil }
            guard bytes.readableBytes == 4, let value = bytes.readInteger(as: Int32.self) else { throw .corrupt("an integer of \(bytes.readableBytes) bytes") }
            return value
        }

        /// A cell that may not be NULL.
        static func required<Value>(_ value: Value?) throws(PostgresStoreError) -> Value {
            guard let value else { throw .corrupt("NULL in a column that has none") }
            return value
        }
    }

    /// `value` as a bind of a statement run through postgres-nio's EventLoopFuture interface.
    static func bind<Value: PostgresNonThrowingEncodable>(_ value: Value) -> PostgresData {
        var buffer = ByteBuffer()
        value.encode(into: &buffer, context: .default)
        return PostgresData(type: Value.psqlType, formatCode: Value.psqlFormat, value: buffer)
    }
}
