import Foundation
import KeyholePostgres
import KeyholeProtocol
import KeyholeStore
import KeyholeTestSupport
import PostgresNIO
import Testing

extension PostgresSuites {
    /// `StoreImporter` (POSTGRES.md, "From one host to several") between a local store and a real
    /// PostgreSQL, in process: what the rows hold after the copy. keyholed's flag around it is tested
    /// with processes (KeyholedTests, PostgresMigrationEndToEndTests).
    @Suite("local store copied into PostgreSQL", .serialized)
    struct StoreImporterTests {
        static let now: Int64 = 1_800_000_000

        /// A local store in a fresh directory and a migrated database, for `body`.
        static func with(_ body: @escaping @Sendable (Store, PostgresStore, PostgresClient) async throws -> Void) async throws {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kh-import-\(UUID())").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let (store, _) = try Store.open(stateDirectory: directory, now: Self.now)
            let committer = Task { await StoreCommitter(store: store, logger: PostgresTestDatabase.logger).run() }
            defer { committer.cancel() }
            try await PostgresStoreTests.withStore { shared, client, _ in try await body(store, shared, client) }
        }

        @Test("outbox entries keep their 64-bit ids (the bigint of the same bits), kind, time and payload, due at once; a second run adds nothing")
        func outbox() async throws {
            try await Self.with { local, shared, client in
                var added: [OutboxEntry] = []
                // Random ids: with 24 of them, some are all but certain to be at or above 2^63.
                for n in 0..<24 {
                    added.append(try local.addOutbox(("apple.revoke", ["sub": .string("00\(n).x"), "n": .int(Int64(n))]), now: Self.now + Int64(n)) { _ in })
                }
                let first = try await StoreImporter(source: local, target: shared, logger: PostgresTestDatabase.logger).run(now: Self.now)
                #expect(first.outbox == PostgresStore.ImportCount(copied: 24, present: 0))
                let rows = try await client.query("SELECT id FROM keyhole.outbox")
                var ids: Set<UInt64> = []
                for try await id in rows.decode(Int64.self) { ids.insert(UInt64(bitPattern: id)) }
                #expect(ids == Set(added.map(\.id)))
                let claimed = try await shared.claimOutbox(kind: "apple.revoke", limit: 100, lease: 60, now: Self.now + 24)
                #expect(Set(claimed.map(\.entry.idText)) == Set(added.map(\.idText)))
                #expect(claimed.allSatisfy { work in work.attempts == 0 && added.contains(work.entry) })
                let second = try await StoreImporter(source: local, target: shared, logger: PostgresTestDatabase.logger).run(now: Self.now)
                #expect(second.outbox == PostgresStore.ImportCount(copied: 0, present: 24) && second.copied == 0)
            }
        }

        @Test("sessions keep id, check, times, idle and data (their tokens work there); users their fields; expired sessions stay; small batches copy all")
        func sessionsAndUsers() async throws {
            try await Self.with { local, shared, _ in
                var tokens: [(String, Session)] = []
                for n in 0..<25 {
                    let principal = Principal(issuer: "corp", sub: "user\(n % 10)")
                    let data: [UInt8]? = n % 2 == 0 ? Array("{\"n\":\(n)}".utf8) : nil
                    tokens.append(try local.createSession(for: principal, now: Self.now, ttl: 3600, idle: 600, data: data) { _ in })
                }
                let expired = try local.createSession(for: Principal(issuer: "corp", sub: "gone"), now: Self.now - 7200, ttl: 3600, idle: 600, data: nil) { _ in }
                _ = try local.updateUser(Principal(issuer: "corp", sub: "user3"), now: Self.now, completion: { _ in }) { user in
                    user.fields["email"] = "u3@example.com"
                    user.fields["ext"] = ["sealed": "opaque"]
                }
                // A record made by user.update alone: no last login, which stays none.
                let noLogin = Principal(issuer: "corp", sub: "never")
                _ = try local.updateUser(noLogin, now: Self.now, completion: { _ in }) { user in user.fields["name"] = "Never" }
                var importer = StoreImporter(source: local, target: shared, logger: PostgresTestDatabase.logger)
                importer.batchSize = 4
                let report = try await importer.run(now: Self.now + 10)
                #expect(report.sessions == PostgresStore.ImportCount(copied: 25, present: 0) && report.expiredSessions == 1)
                #expect(report.users == PostgresStore.ImportCount(copied: 12, present: 0), "ten users, the expired session's and one without a login")
                for (token, session) in tokens {
                    let found = try #require(try await shared.session(token: token, now: Self.now + 10))
                    var expected = session
                    expected.lastSeenAt = Self.now + 10
                    #expect(found.session == expected)
                    #expect(found.user == local.user(session.principal))
                }
                #expect(try await shared.session(token: expired.token, now: Self.now + 10) == nil)
                #expect(try await shared.user(Principal(issuer: "corp", sub: "user3"))?.fields["ext"] == ["sealed": "opaque"])
                let never = try #require(try await shared.user(noLogin))
                #expect(never == local.user(noLogin) && never.lastLoginAt == nil && never.fields["name"] == "Never")
            }
        }
    }
}
