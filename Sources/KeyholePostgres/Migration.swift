/// One step of the schema (POSTGRES.md, "Tables" and "Migrations"): its version and its statements,
/// run in order in the migration's transaction. Never edited once released: a change is a new version.
public struct Migration: Sendable {
    /// 1, 2, ...: each migration's is one more than the one before it.
    public let version: Int
    /// The statements for a schema, one per call (the extended protocol takes one at a time).
    public let statements: @Sendable (SchemaName) -> [String]

    public init(version: Int, statements: @escaping @Sendable (SchemaName) -> [String]) {
        self.version = version
        self.statements = statements
    }

    /// Every migration this keyholed knows, oldest first.
    public static let all: [Migration] = [version1]

    /// The newest version this keyholed knows.
    public static var newest: Int { all.last?.version ?? 0 }

    /// Version 1: users, sessions, the outbox, seen notifications, pending web authorizations.
    static let version1 = Migration(version: 1) { schema in
        let s = schema.quoted
        return [
            """
            CREATE TABLE \(s).users (
                issuer bytea NOT NULL, sub bytea NOT NULL,
                created_at bigint NOT NULL, updated_at bigint NOT NULL, last_login_at bigint,
                fields bytea NOT NULL, revision bigint NOT NULL,
                PRIMARY KEY (issuer, sub))
            """,
            """
            CREATE TABLE \(s).sessions (
                id bytea PRIMARY KEY CHECK (length(id) = 16), check_bytes bytea NOT NULL CHECK (length(check_bytes) = 16),
                issuer bytea NOT NULL, sub bytea NOT NULL,
                created_at bigint NOT NULL, expires_at bigint NOT NULL, last_seen_at bigint NOT NULL,
                idle_seconds integer NOT NULL, data bytea)
            """,
            "CREATE INDEX sessions_by_user ON \(s).sessions (issuer, sub)",
            "CREATE INDEX sessions_by_expiry ON \(s).sessions (expires_at)",
            """
            CREATE TABLE \(s).outbox (
                id bigint PRIMARY KEY, kind text NOT NULL, created_at bigint NOT NULL, payload bytea NOT NULL,
                attempts integer NOT NULL DEFAULT 0, next_attempt_at bigint NOT NULL,
                lease_owner text, lease_until bigint)
            """,
            "CREATE SEQUENCE \(s).outbox_ids",
            "CREATE TABLE \(s).apple_notifications_seen (jti bytea PRIMARY KEY, expires_at bigint NOT NULL)",
            """
            CREATE TABLE \(s).apple_pending (
                state_hash bytea PRIMARY KEY, binding_hash bytea NOT NULL, nonce_hash bytea NOT NULL,
                client_id bytea NOT NULL, redirect_uri bytea NOT NULL, return_to bytea NOT NULL,
                peer bigint NOT NULL, expires_at bigint NOT NULL)
            """,
            "CREATE INDEX apple_pending_by_expiry ON \(s).apple_pending (expires_at)",
        ]
    }
}
