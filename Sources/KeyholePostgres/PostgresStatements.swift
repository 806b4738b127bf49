import NIOCore
import PostgresNIO

/// The statements of the hot paths (`session.get` on a cache miss, `session.create`), prepared once
/// on each pooled connection (postgres-nio keeps them by name) so that PostgreSQL parses and plans
/// them once, not on every call: most of a short statement's cost on the server.
///
/// A prepared statement's SQL is fixed for the process, and the schema is configuration, so these
/// name their tables without a schema: every connection of the store's pool sets `search_path` to
/// the schema when it starts (`PostgresStore.startupParameters(for:)`), and keyholed checks it does
/// (`PostgresStore.checkSearchPath()`) before serving.
enum PostgresStatements {
    /// A session and its user's record by the session's id.
    struct ReadSession: PostgresPreparedStatement {
        static let name = "keyhole_read_session_v1"
        static let sql = """
            SELECT s.check_bytes, s.issuer, s.sub, s.created_at, s.expires_at, s.last_seen_at, s.idle_seconds, s.data,
                   u.created_at, u.updated_at, u.last_login_at, u.fields
            FROM sessions s LEFT JOIN users u ON u.issuer = s.issuer AND u.sub = s.sub WHERE s.id = $1
            """
        typealias Row = (ByteBuffer, ByteBuffer, ByteBuffer, Int64, Int64, Int64, Int32, ByteBuffer?, Int64?, Int64?, Int64?, ByteBuffer?)

        var id: ByteBuffer

        func makeBindings() -> PostgresBindings {
            var binds = PostgresBindings()
            binds.append(id)
            return binds
        }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Row.self) }
    }

    /// A sign-in's user row: made, or its login stamped (never moved back).
    struct StampLogin: PostgresPreparedStatement {
        static let name = "keyhole_stamp_login_v1"
        static let sql = """
            INSERT INTO users (issuer, sub, created_at, updated_at, last_login_at, fields, revision) VALUES ($1, $2, $3, $3, $3, $4, 1)
            ON CONFLICT (issuer, sub) DO UPDATE SET last_login_at = greatest(users.last_login_at, EXCLUDED.last_login_at)
            """
        typealias Row = ()

        var issuer: ByteBuffer
        var sub: ByteBuffer
        var now: Int64

        func makeBindings() -> PostgresBindings {
            var binds = PostgresBindings()
            binds.append(issuer)
            binds.append(sub)
            binds.append(now)
            binds.append(PostgresRows.bytes("{}"))
            return binds
        }

        func decodeRow(_ row: PostgresRow) throws -> Row {}
    }

    /// A new session; a row back if it was inserted (an id already there inserts nothing).
    struct InsertSession: PostgresPreparedStatement {
        static let name = "keyhole_insert_session_v1"
        static let sql = """
            INSERT INTO sessions (id, check_bytes, issuer, sub, created_at, expires_at, last_seen_at, idle_seconds, data)
            VALUES ($1, $2, $3, $4, $5, $6, $5, $7, $8) ON CONFLICT (id) DO NOTHING RETURNING 1
            """
        typealias Row = Int32

        var binds: PostgresBindings

        func makeBindings() -> PostgresBindings { binds }

        func decodeRow(_ row: PostgresRow) throws -> Row { try row.decode(Int32.self) }
    }
}
