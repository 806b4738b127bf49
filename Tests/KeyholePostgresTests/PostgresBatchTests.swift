import Foundation
import KeyholePostgres
import KeyholeStore
import KeyholeTestSupport
import PostgresNIO
import Testing

extension PostgresSuites {
    /// Cache misses and creates in batches, on connections of their own (POSTGRES.md, "Cost per
    /// request"): many calls to one statement, each answered as if alone.
    @Suite("PostgreSQL batches", .serialized)
    struct PostgresBatchTests {
        static let now: Int64 = 1_800_000_000

        static func data(_ n: Int) -> [UInt8]? { n % 3 == 0 ? nil : Array("{\"n\":\(n)}".utf8) }

        @Test("creates and reads at once share statements; each is answered as if alone: its own token, its data, its user's latest login; a token whose row's check differs, or of no session, finds nothing")
        func shared() async throws {
            try await PostgresStoreTests.withStore { store, _, cluster in
                let before = store.batchCounts
                let made = try await withThrowingTaskGroup(of: (Int, String, Session).self) { group in
                    for n in 0..<200 {
                        group.addTask {
                            // Seven users, several times each in a batch: their rows are changed once per statement.
                            let principal = Principal(issuer: "corp", sub: "u\(n % 7)")
                            let (token, session) = try await store.createSession(
                                for: principal, now: Self.now + Int64(n % 5), ttl: 3600, idle: 3600, data: Self.data(n))
                            return (n, token, session)
                        }
                    }
                    var made: [(Int, String, Session)] = []
                    for try await one in group { made.append(one) }
                    return made
                }
                let created = store.batchCounts
                #expect(created.creates - before.creates == 200)
                #expect(created.createBatches - before.createBatches < 200, "200 creates at once never shared a statement")
                #expect(Set(made.map(\.1)).count == 200 && Set(made.map(\.2.id)).count == 200)
                #expect(try await cluster.sql("SELECT count(*) FROM keyhole.sessions") == "200\n")
                #expect(try await cluster.sql("SELECT count(*) FROM keyhole.users") == "7\n")
                for sub in 0..<7 {
                    let user = try #require(try await store.user(Principal(issuer: "corp", sub: "u\(sub)")))
                    #expect(user.lastLoginAt == Self.now + 4 && user.createdAt <= Self.now + 4, "u\(sub): \(user)")
                }
                // Ten sessions' checks changed in the table: their tokens now name a row by its id
                // whose check does not match, in the middle of a batch.
                let altered = Set(made.prefix(10).map(\.0))
                let ids = made.prefix(10).map { "'\\x" + PostgresStoreTests.hex($0.2.id.bytes) + "'::bytea" }.joined(separator: ",")
                _ = try await cluster.sql("UPDATE keyhole.sessions SET check_bytes = '\\x00000000000000000000000000000000'::bytea WHERE id IN (\(ids))")
                // Reads at once (no listener: the cache is bypassed, every one goes to the database),
                // and with them tokens of no session.
                let forged = made.prefix(20).map { n, token, _ in (n, String(token.dropLast()) + (token.hasSuffix("A") ? "B" : "A")) }
                let reads = try await withThrowingTaskGroup(of: (Int, Bool, Session?).self) { group in
                    for (n, token, _) in made { group.addTask { (n, true, try await store.session(token: token, now: Self.now + 10)?.session) } }
                    for (n, token) in forged { group.addTask { (n, false, try await store.session(token: token, now: Self.now + 10)?.session) } }
                    var reads: [(Int, Bool, Session?)] = []
                    for try await one in group { reads.append(one) }
                    return reads
                }
                let read = store.batchCounts
                #expect(read.reads - created.reads == 220)
                #expect(read.readBatches - created.readBatches < 220, "220 reads at once never shared a statement")
                let sessions = Dictionary(uniqueKeysWithValues: made.map { ($0.0, $0.2) })
                for (n, genuine, session) in reads {
                    if altered.contains(n) {
                        #expect(session == nil, "session \(n) found with a check that does not match its token")
                    } else if genuine {
                        #expect(session?.id == sessions[n]?.id && session?.data == Self.data(n) && session?.principal.sub == "u\(n % 7)", "session \(n)")
                    } else {
                        #expect(session == nil, "a token one character off found session \(n)")
                    }
                }
            }
        }

        @Test("a batch stuck past its bound (the user's row locked elsewhere) is unavailable within it; its connection is closed, and the next batch makes a new one")
        func overrun() async throws {
            let cluster = try await PostgresCluster.start()
            try await PostgresTestDatabase.with(PostgresTestDatabase.configuration(cluster)) { client in
                _ = try await SchemaMigrator(schema: .standard, appliedBy: "test", now: { 0 }, logger: PostgresTestDatabase.logger).migrate(client)
                // Long enough that the calls which should succeed (a connection made, then a create)
                // do so on a loaded CI machine; the one held by the lock must still fail at it.
                let store = PostgresTestDatabase.store(client, cluster, timeout: .seconds(2))
                try await PostgresTestDatabase.shuttingDown([store]) {
                    let alice = Principal(issuer: "corp", sub: "alice")
                    _ = try await store.createSession(for: alice, now: Self.now, ttl: 60, idle: 60, data: nil)
                    let batchPIDs = "SELECT string_agg(pid::text, ',' ORDER BY pid) FROM pg_stat_activity WHERE application_name = 'keyholed-batches'"
                    let first = try await cluster.sql(batchPIDs)
                    let (locked, holding) = AsyncStream<Void>.makeStream()
                    let (release, releasing) = AsyncStream<Void>.makeStream()
                    let holder = Task {
                        try await client.withTransaction(logger: PostgresTestDatabase.logger) { connection in
                            try await connection.query("SELECT 1 FROM keyhole.users WHERE sub = 'alice'::bytea FOR UPDATE", logger: PostgresTestDatabase.logger)
                            holding.yield()
                            for await _ in release { break }
                        }
                    }
                    for await _ in locked { break }
                    let started = ContinuousClock.now
                    let error = await #expect(throws: PostgresStoreError.self) {
                        _ = try await store.createSession(for: alice, now: Self.now, ttl: 60, idle: 60, data: nil)
                    }
                    #expect(error?.isUnavailable == true, "\(String(describing: error))")
                    // The bound is 2 s; loose, as the whole suite shares two cores.
                    #expect(ContinuousClock.now - started < .seconds(10))
                    releasing.yield()
                    try await holder.value
                    // The next batch, on a connection made again: answered.
                    let bob = try await store.createSession(for: Principal(issuer: "corp", sub: "bob"), now: Self.now, ttl: 60, idle: 60, data: nil)
                    #expect(try await store.session(token: bob.token, now: Self.now)?.session.id == bob.session.id)
                    let now = try await cluster.sql(batchPIDs)
                    let gone = Set(first.split(separator: ",")).subtracting(now.split(separator: ","))
                    #expect(!gone.isEmpty, "the overrun batch's connection was kept: before \(first), after \(now)")
                    await store.shutDown()
                    let closed = await #expect(throws: PostgresStoreError.self) { _ = try await store.session(token: bob.token, now: Self.now) }
                    #expect(closed?.isUnavailable == true)
                }
            }
            #expect(await cluster.close() == 0)
        }
    }
}
