import KeyholePostgres
import KeyholeProtocol
import KeyholeStore
import KeyholeTestSupport
import Logging
import NIOCore
import PostgresNIO
import Testing

extension PostgresSuites {
    /// What only the PostgreSQL store has: what its rows hold, and the notifications its changes send
    /// (POSTGRES.md, "Reads").
    @Suite("PostgreSQL store", .serialized)
    struct PostgresStoreTests {
        static let now: Int64 = 1_800_000_000

        static func hex(_ bytes: [UInt8]) -> String { bytes.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined() }

        static func withStore(_ body: @escaping @Sendable (PostgresStore, PostgresClient, PostgresCluster) async throws -> Void) async throws {
            let cluster = try await PostgresCluster.start()
            try await PostgresTestDatabase.with(PostgresTestDatabase.configuration(cluster)) { client in
                _ = try await SchemaMigrator(schema: .standard, appliedBy: "test", now: { 0 }, logger: PostgresTestDatabase.logger).migrate(client)
                let store = PostgresTestDatabase.store(client, cluster)
                try await PostgresTestDatabase.shuttingDown([store]) { try await body(store, client, cluster) }
            }
            #expect(await cluster.close() == 0)
        }

        @Test("the hot paths' prepared statements name no schema: a pool without search_path set to it is refused before serving, not misread")
        func searchPath() async throws {
            try await Self.withStore { store, _, cluster in
                try await store.checkSearchPath()
                // Read and written through the prepared statements, on the pool's connections.
                let (token, _) = try await store.createSession(for: Principal(issuer: "corp", sub: "sp"), now: Self.now, ttl: 60, idle: 60, data: nil)
                #expect(try await store.session(token: token, now: Self.now)?.session.principal.sub == "sp")
                var bare = PostgresTestDatabase.configuration(cluster)
                // As a pooler or a role's setting might leave it (the default, "$user", public, would
                // find the schema here: the test role's name is the schema's).
                bare.options.additionalStartupParameters = [("search_path", "public")]
                try await PostgresTestDatabase.with(bare) { client in
                    let bare = PostgresTestDatabase.store(client, cluster)
                    let error = await #expect(throws: PostgresStoreError.self) { try await bare.checkSearchPath() }
                    await bare.shutDown()
                    #expect(error?.isRefused == true && error?.message.contains("search_path") == true, "\(String(describing: error))")
                }
                // A schema named unlike the role (whose "$user" would find the default one): the
                // prepared statements read and write there, and nothing lands in the other.
                let other = try #require(SchemaName("site_2"))
                var configured = PostgresTestDatabase.configuration(cluster)
                configured.options.additionalStartupParameters = PostgresStore.startupParameters(for: other)
                try await PostgresTestDatabase.with(configured) { client in
                    _ = try await SchemaMigrator(schema: other, appliedBy: "test", now: { 0 }, logger: PostgresTestDatabase.logger).migrate(client)
                    let store2 = PostgresTestDatabase.store(client, cluster, schema: other)
                    try await PostgresTestDatabase.shuttingDown([store2]) {
                        try await store2.checkSearchPath()
                        let (token, _) = try await store2.createSession(for: Principal(issuer: "corp", sub: "s2"), now: Self.now, ttl: 60, idle: 60, data: nil)
                        #expect(try await store2.session(token: token, now: Self.now)?.session.principal.sub == "s2")
                    }
                }
                #expect(try await cluster.sql("SELECT 'n=' || count(*) FROM site_2.sessions").contains("n=1"))
                #expect(try await cluster.sql("SELECT 'n=' || count(*) FROM keyhole.sessions WHERE sub = 's2'::bytea").contains("n=0"))
            }
        }

        @Test("no session token, nor any part of one, is in a dump of the database; its id and check are")
        func dump() async throws {
            try await Self.withStore { store, _, cluster in
                var tokens: [String] = []
                var ids: [SessionID] = []
                for index in 0..<5 {
                    let principal = Principal(issuer: "corp", sub: "user\(index)")
                    let (token, session) = try await store.createSession(for: principal, now: Self.now, ttl: 3600, idle: 3600, data: nil)
                    tokens.append(token)
                    ids.append(session.id)
                }
                let dump = try #require(try await cluster.command("dump")["out"]?.stringValue)
                for id in ids { #expect(dump.contains("\\x" + Self.hex(id.bytes)), "the dump has the sessions' rows, by id") }
                for token in tokens {
                    // The whole token, its random part, and any 16 characters of it.
                    let random = String(token.dropFirst(3))
                    #expect(!dump.contains(token) && !dump.contains(random))
                    for start in stride(from: 0, to: random.count - 16, by: 8) {
                        let piece = random.dropFirst(start).prefix(16)
                        #expect(!dump.contains(piece), "a piece of a token in the dump")
                    }
                }
            }
        }

        @Test("changes notify what a cache must drop: a revoke its session, revoke_all, update and delete its user; creates, reads and a sign-in changing nothing but the last login nothing")
        func notifications() async throws {
            try await Self.withStore { store, client, _ in
                let (heard, continuation) = AsyncStream<String>.makeStream()
                let listening = AsyncStream<Void>.makeStream()
                let listener = Task {
                    try await client.withConnection { connection in
                        try await connection.listen(on: "keyhole_keyhole") { notifications in
                            listening.continuation.yield()
                            for try await notification in notifications { continuation.yield(notification.payload) }
                        }
                    }
                }
                defer { listener.cancel() }
                var ready = listening.stream.makeAsyncIterator()
                _ = await ready.next()
                var payloads = heard.makeAsyncIterator()

                let alice = Principal(issuer: "corp", sub: "alice")
                let (token, session) = try await store.createSession(for: alice, now: Self.now, ttl: 3600, idle: 3600, data: nil)
                _ = try await store.session(token: token, now: Self.now + 100)
                #expect(try await store.revokeSession(token: token, now: Self.now + 200))
                // The first notification heard is the revoke's: the create and the read sent none.
                #expect(await payloads.next() == "s:" + Self.hex(session.id.bytes))
                _ = try await store.updateUser(alice, now: Self.now + 300) { $0.fields["email"] = "a@example.com" }
                let userKey = await payloads.next()
                #expect(userKey?.hasPrefix("u:") == true && userKey?.utf8.count == 66)
                #expect(userKey?.contains("alice") == false, "no identity in a notification")
                // A returning user's sign-in with nothing to change stamps the last login alone, as a
                // create does: nothing for a cache to drop. The next notification is this revoke's.
                let signedIn = try await store.signIn(alice, now: Self.now + 310, ttl: 3600, idle: 3600, data: nil) { _ in }
                #expect(signedIn.user.lastLoginAt == Self.now + 310 && signedIn.user.updatedAt == Self.now + 300)
                #expect(try await store.user(alice)?.lastLoginAt == Self.now + 310)
                #expect(try await store.revokeSession(token: signedIn.token, now: Self.now + 320))
                #expect(await payloads.next() == "s:" + Self.hex(signedIn.session.id.bytes))
                _ = try await store.createSession(for: alice, now: Self.now + 400, ttl: 3600, idle: 3600, data: nil)
                #expect(try await store.revokeSessions(of: alice, now: Self.now + 500) == 1)
                #expect(await payloads.next() == userKey)
                _ = try await store.deleteUser(alice, now: Self.now + 600)
                #expect(await payloads.next() == userKey)
            }
        }

        @Test("pruning removes sessions past their expiry, and idle ones only after a grace; live ones stay; in batches")
        func pruning() async throws {
            try await Self.withStore { store, _, cluster in
                let alice = Principal(issuer: "corp", sub: "alice")
                for _ in 0..<5 { _ = try await store.createSession(for: alice, now: Self.now, ttl: 60, idle: 60, data: nil) }
                let idle = try await store.createSession(for: alice, now: Self.now, ttl: 86_400, idle: 600, data: nil).token
                let live = try await store.createSession(for: alice, now: Self.now, ttl: 86_400, idle: 86_400, data: nil).token
                // At +700: five past their expiry; the idle one past its 600 s but within the grace.
                #expect(try await store.pruneExpired(now: Self.now + 700, limit: 2) == 2, "a batch at most")
                #expect(try await store.pruneExpired(now: Self.now + 700, limit: 100) == 3)
                #expect(try await store.pruneExpired(now: Self.now + 700, limit: 100) == 0)
                #expect(try await cluster.sql("SELECT count(*) FROM keyhole.sessions") == "2\n")
                // Past the grace, the idle one goes; the live one stays.
                #expect(try await store.pruneExpired(now: Self.now + 600 + PostgresStore.idleGrace, limit: 100) == 1)
                #expect(try await store.session(token: live, now: Self.now + 1000) != nil)
                #expect(try await store.session(token: idle, now: Self.now + 1000) == nil)
            }
        }

        @Test("two first updates of a new user at once, on two connections: neither is lost")
        func concurrentFirstUpdates() async throws {
            try await Self.withStore { store, _, _ in
                for round in 0..<20 {
                    let principal = Principal(issuer: "corp", sub: "new\(round)")
                    async let email = store.updateUser(principal, now: Self.now) { $0.fields["email"] = "n@example.com" }
                    async let name = store.updateUser(principal, now: Self.now) { $0.fields["name"] = ["given": "N"] }
                    let (first, second) = try await (email, name)
                    #expect([first.created, second.created].filter { $0 }.count == 1, "one of them made the record")
                    let user = try #require(try await store.user(principal))
                    #expect(user.fields["email"] == "n@example.com" && user.fields["name"] == ["given": "N"], "round \(round): \(user.fields)")
                }
            }
        }

        @Test("a sign-in whose session PostgreSQL refuses changes nothing: the record's change is rolled back with it")
        func signInRolledBack() async throws {
            try await Self.withStore { store, _, cluster in
                let bob = Principal(issuer: "apple", sub: "001.bob")
                _ = try await store.updateUser(bob, now: Self.now) { $0.fields["email"] = "old@example.com" }
                _ = try await cluster.sql("""
                    CREATE FUNCTION keyhole.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'no sessions today'; END $$;
                    CREATE TRIGGER refuse BEFORE INSERT ON keyhole.sessions FOR EACH ROW EXECUTE FUNCTION keyhole.refuse();
                    """)
                await #expect(throws: PostgresStoreError.self) {
                    _ = try await store.signIn(bob, now: Self.now + 10, ttl: 60, idle: 60, data: nil) { $0.fields["email"] = "new@example.com" }
                }
                let kept = try #require(try await store.user(bob))
                #expect(kept.fields["email"] == "old@example.com" && kept.updatedAt == Self.now && kept.lastLoginAt == nil, "\(kept)")
                _ = try await cluster.sql("DROP TRIGGER refuse ON keyhole.sessions")
                let signedIn = try await store.signIn(bob, now: Self.now + 20, ttl: 60, idle: 60, data: nil) { $0.fields["email"] = "new@example.com" }
                #expect(signedIn.user.fields["email"] == "new@example.com" && signedIn.user.lastLoginAt == Self.now + 20)
            }
        }

        @Test("a row keyholed could not have written is corrupt, not a crash or another user's session")
        func corruptRows() async throws {
            try await Self.withStore { store, _, cluster in
                let alice = Principal(issuer: "corp", sub: "alice")
                let (token, _) = try await store.createSession(for: alice, now: Self.now, ttl: 3600, idle: 3600, data: nil)
                try await cluster.sql("UPDATE keyhole.sessions SET sub = '\\xff'::bytea")
                let error = await #expect(throws: PostgresStoreError.self) { _ = try await store.session(token: token, now: Self.now) }
                #expect(error?.isCorrupt == true)
                // A time no keyholed writes, where a sum would overflow: refused, not a trap.
                try await cluster.sql("UPDATE keyhole.sessions SET sub = 'alice'::bytea, last_seen_at = 9223372036854775000")
                let overflow = await #expect(throws: PostgresStoreError.self) { _ = try await store.session(token: token, now: Self.now) }
                #expect(overflow?.isCorrupt == true)
                try await cluster.sql("UPDATE keyhole.users SET fields = 'not json'::bytea")
                let userError = await #expect(throws: PostgresStoreError.self) { _ = try await store.user(alice) }
                #expect(userError?.isCorrupt == true)
            }
        }
    }
}
