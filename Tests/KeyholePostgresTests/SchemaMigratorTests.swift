@testable import KeyholePostgres
import KeyholeTestSupport
import PostgresNIO
import Testing

extension PostgresSuites {
    /// POSTGRES.md, "Migrations", against a real PostgreSQL (Scripts/pg_cluster.py).
    @Suite("schema migrations", .serialized)
    struct SchemaMigratorTests {
        static func migrator(_ schema: SchemaName = .standard, migrations: [Migration] = Migration.all, host: String = "host-a") -> SchemaMigrator {
            SchemaMigrator(schema: schema, migrations: migrations, appliedBy: "keyholed test on \(host)", now: { 1_800_000_000 }, logger: PostgresTestDatabase.logger)
        }

        /// The schema's objects as psql lists them: `name|kind`, sorted.
        static func objects(_ cluster: PostgresCluster, schema: String = "keyhole") async throws -> [String] {
            let out = try await cluster.sql("""
                SELECT c.relname || '|' || c.relkind::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = '\(schema)' AND c.relkind IN ('r', 'i', 'S') ORDER BY 1
                """)
            return out.split(separator: "\n").map(String.init)
        }

        @Test("a new database gets version 1: POSTGRES.md's tables, indexes and sequence, identities as bytea; a second run does nothing")
        func fresh() async throws {
            let cluster = try await PostgresCluster.start()
            let configuration = PostgresTestDatabase.configuration(cluster)
            let first = try await PostgresTestDatabase.with(configuration) { try await Self.migrator().migrate($0) }
            #expect(first == SchemaMigrator.Report(from: 0, to: 1, applied: [1]))
            let objects = try await Self.objects(cluster)
            for table in ["users", "sessions", "outbox", "apple_notifications_seen", "apple_pending", "schema_migrations"] {
                #expect(objects.contains("\(table)|r"), "\(objects)")
            }
            for index in ["sessions_by_user", "sessions_by_expiry", "apple_pending_by_expiry", "users_pkey", "sessions_pkey"] {
                #expect(objects.contains("\(index)|i"), "\(objects)")
            }
            #expect(objects.contains("outbox_ids|S"))
            // Identities and secrets' digests are bytes, never text (collations, NUL).
            let types = try await cluster.sql("""
                SELECT table_name || '.' || column_name || '=' || data_type FROM information_schema.columns
                WHERE table_schema = 'keyhole' AND column_name IN ('issuer', 'sub', 'id', 'check_bytes', 'fields', 'data', 'state_hash')
                ORDER BY 1
                """)
            #expect(types.split(separator: "\n").allSatisfy { $0.hasSuffix("=bytea") || $0.hasPrefix("outbox.id=") }, "\(types)")
            #expect(types.contains("users.issuer=bytea") && types.contains("sessions.check_bytes=bytea"))
            #expect(try await cluster.sql("SELECT version || '|' || applied_by FROM keyhole.schema_migrations") == "1|keyholed test on host-a\n")

            let again = try await PostgresTestDatabase.with(configuration) { try await Self.migrator().migrate($0) }
            #expect(again == SchemaMigrator.Report(from: 1, to: 1, applied: []))
            #expect(try await Self.objects(cluster) == objects)
            #expect(await cluster.close() == 0)
        }

        @Test("two hosts starting together: the advisory lock makes one migrate and the other find it done")
        func together() async throws {
            let cluster = try await PostgresCluster.start()
            let configuration = PostgresTestDatabase.configuration(cluster)
            let reports = try await withThrowingTaskGroup(of: SchemaMigrator.Report.self) { group in
                for host in ["host-a", "host-b", "host-c"] {
                    group.addTask { try await PostgresTestDatabase.with(configuration) { try await Self.migrator(host: host).migrate($0) } }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(reports.filter { $0.applied == [1] }.count == 1, "\(reports)")
            #expect(reports.filter { $0 == SchemaMigrator.Report(from: 1, to: 1, applied: []) }.count == 2, "\(reports)")
            #expect(try await cluster.sql("SELECT count(*) FROM keyhole.schema_migrations") == "1\n")
            #expect(await cluster.close() == 0)
        }

        @Test("a schema from a newer keyholed is refused, and nothing is changed")
        func newer() async throws {
            let cluster = try await PostgresCluster.start()
            let configuration = PostgresTestDatabase.configuration(cluster)
            _ = try await PostgresTestDatabase.with(configuration) { try await Self.migrator().migrate($0) }
            try await cluster.sql("INSERT INTO keyhole.schema_migrations VALUES (2, 0, 'keyholed from the future')")
            let before = try await Self.objects(cluster)
            let error = await #expect(throws: PostgresStoreError.self) {
                _ = try await PostgresTestDatabase.with(configuration) { try await Self.migrator().migrate($0) }
            }
            #expect(error?.isSchemaTooNew == true, "\(String(describing: error))")
            #expect(error?.message.contains("version 2, this keyholed knows up to 1") == true)
            #expect(try await Self.objects(cluster) == before)
            #expect(await cluster.close() == 0)
        }

        @Test("a migration that fails leaves the schema as it was: none of its statements stay, its version is not recorded")
        func failing() async throws {
            let cluster = try await PostgresCluster.start()
            let configuration = PostgresTestDatabase.configuration(cluster)
            _ = try await PostgresTestDatabase.with(configuration) { try await Self.migrator().migrate($0) }
            let broken = Migration(version: 2) { schema in
                ["CREATE TABLE \(schema).half_done (x integer)", "CREATE TABLE \(schema).users (x integer)"]
            }
            let error = await #expect(throws: PostgresStoreError.self) {
                _ = try await PostgresTestDatabase.with(configuration) { try await Self.migrator(migrations: Migration.all + [broken]).migrate($0) }
            }
            #expect(error?.isRefused == true && error?.sqlState == "42P07", "\(String(describing: error))")
            #expect(try await cluster.sql("SELECT max(version) FROM keyhole.schema_migrations") == "1\n")
            #expect(try await Self.objects(cluster).contains { $0.hasPrefix("half_done|") } == false)
            #expect(await cluster.close() == 0)
        }

        @Test("another schema is another deployment: its own tables and its own lock")
        func otherSchema() async throws {
            let cluster = try await PostgresCluster.start()
            let configuration = PostgresTestDatabase.configuration(cluster)
            let site2 = try #require(SchemaName("site_2"))
            _ = try await PostgresTestDatabase.with(configuration) { try await Self.migrator(site2).migrate($0) }
            #expect(try await Self.objects(cluster, schema: "site_2").contains("users|r"))
            #expect(try await Self.objects(cluster, schema: "keyhole").isEmpty)
            #expect(await cluster.close() == 0)
        }

        @Test("over loopback TCP with a SCRAM password; a wrong password fails within the bound, never hangs")
        func scram() async throws {
            let cluster = try await PostgresCluster.start(tcp: true)
            let report = try await PostgresTestDatabase.with(PostgresTestDatabase.configuration(cluster, tcp: true)) {
                try await Self.migrator().migrate($0)
            }
            #expect(report.applied == [1])
            let error = await #expect(throws: PostgresStoreError.self) {
                _ = try await PostgresTestDatabase.with(PostgresTestDatabase.configuration(cluster, tcp: true, password: "wrong")) {
                    try await Self.migrator().migrate($0, within: .seconds(5))
                }
            }
            // The pool keeps retrying a connection it could not open, so the bound ends it: unavailable.
            #expect(error?.isUnavailable == true, "\(String(describing: error))")
            #expect(await cluster.close() == 0)
        }

        @Test("schema names: lower-case identifiers only, never pg_; the lock key differs per schema")
        func names() {
            for good in ["keyhole", "site_2", "_x", String(repeating: "a", count: 48)] { #expect(SchemaName(good) != nil, "\(good)") }
            for bad in ["", "Keyhole", "2site", "a-b", "a b", "a\"b", "pg_keyhole", String(repeating: "a", count: 49), "ké"] {
                #expect(SchemaName(bad) == nil, "\(bad)")
            }
            #expect(SchemaName.standard.advisoryLockKey != SchemaName("site_2")!.advisoryLockKey)
            #expect(SchemaName.standard.advisoryLockKey == SchemaName("keyhole")!.advisoryLockKey)
            #expect(SchemaName.standard.channel == "keyhole_keyhole")
        }
    }
}
