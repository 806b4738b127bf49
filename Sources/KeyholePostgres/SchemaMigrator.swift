import Logging
import PostgresNIO

/// Brings a database's schema up to this keyholed's (POSTGRES.md, "Migrations"): in one transaction,
/// under an advisory lock, so that hosts starting together migrate one after another; a schema newer
/// than this binary's is refused, and a failing migration leaves the schema as it was.
public struct SchemaMigrator: Sendable {
    /// What a migration found and did.
    public struct Report: Sendable, Equatable {
        /// The version the database was at (0: no schema yet).
        public var from: Int
        /// The version it is at now.
        public var to: Int
        /// The migrations applied, in order (none when it was up to date).
        public var applied: [Int]

        public init(from: Int, to: Int, applied: [Int]) {
            self.from = from
            self.to = to
            self.applied = applied
        }
    }

    public let schema: SchemaName
    public let migrations: [Migration]
    /// Who applied them, recorded with each (`keyholed 0.9.0 on host-a`).
    public let appliedBy: String
    private let now: @Sendable () -> Int64
    private let logger: Logger

    /// `migrations` must be numbered 1, 2, ... in order (`Migration.all`; tests give others).
    public init(
        schema: SchemaName, migrations: [Migration] = Migration.all, appliedBy: String, now: @escaping @Sendable () -> Int64,
        logger: Logger
    ) {
        precondition(migrations.enumerated().allSatisfy { $0.offset + 1 == $0.element.version }, "migrations must be numbered 1, 2, ...")
        self.schema = schema
        self.migrations = migrations
        self.appliedBy = appliedBy
        self.now = now
        self.logger = logger
    }

    /// Migrates through `client` (whose `run()` is running), within `limit`: DDL may wait for locks
    /// another host holds, so the bound is longer than a request's.
    public func migrate(_ client: PostgresClient, within limit: Duration = .seconds(60)) async throws(PostgresStoreError) -> Report {
        try await Deadline.run(within: limit, doing: "migrating schema \(schema)") {
            try await client.withTransaction(logger: self.logger) { connection in
                try await self.run(on: connection)
            }
        }
    }

    private func run(on connection: PostgresConnection) async throws -> Report {
        try await connection.query("SELECT pg_advisory_xact_lock(\(schema.advisoryLockKey))", logger: logger)
        try await execute("CREATE SCHEMA IF NOT EXISTS \(schema.quoted)", on: connection)
        try await execute(
            "CREATE TABLE IF NOT EXISTS \(schema.table("schema_migrations")) (version integer PRIMARY KEY, applied_at bigint NOT NULL, applied_by text NOT NULL)",
            on: connection)
        var current = 0
        let rows = try await connection.query(
            PostgresQuery(unsafeSQL: "SELECT coalesce(max(version), 0)::bigint FROM \(schema.table("schema_migrations"))"), logger: logger)
        for try await version in rows.decode(Int.self) { current = version }
        let newest = migrations.last?.version ?? 0
        guard current <= newest else { throw PostgresStoreError.schemaTooNew(found: current, known: newest) }

        var applied: [Int] = []
        for migration in migrations where migration.version > current {
            for statement in migration.statements(schema) {
                try await execute(statement, on: connection)
            }
            var binds = PostgresBindings()
            binds.append(migration.version)
            binds.append(now())
            binds.append(appliedBy)
            try await connection.query(
                PostgresQuery(
                    unsafeSQL: "INSERT INTO \(schema.table("schema_migrations")) (version, applied_at, applied_by) VALUES ($1, $2, $3)",
                    binds: binds),
                logger: logger)
            applied.append(migration.version)
        }
        if !applied.isEmpty {
            logger.notice("postgres.migrated", metadata: ["schema": "\(schema)", "from": "\(current)", "to": "\(newest)"])
        }
        return Report(from: current, to: applied.last ?? current, applied: applied)
    }

    private func execute(_ sql: String, on connection: PostgresConnection) async throws {
        try await connection.query(PostgresQuery(unsafeSQL: sql), logger: logger)
    }
}
