import Foundation
@testable import KeyholePostgres
import KeyholeStore
import KeyholeTestSupport
import Synchronization
import Testing

/// When a session's use is written to its row (POSTGRES.md, "Reads": `last_seen_at`).
@Suite("pending uses")
struct PendingUseTests {
    @Test("due when the row's idle deadline is near, or 60 s past the row's last use, or 60 s after the use; not before")
    func due() {
        let use = PendingUse(used: 1005, rowSeen: 1000, idle: 600)
        #expect(!use.isDue(now: 1005, margin: 14), "a use 5 s after the row's, its deadline 595 s off")
        #expect(!use.isDue(now: 1064, margin: 14))
        #expect(use.isDue(now: 1065, margin: 14), "60 s after the use: no use waits longer")
        let short = PendingUse(used: 1005, rowSeen: 1000, idle: 40)
        #expect(!short.isDue(now: 1025, margin: 14))
        #expect(short.isDue(now: 1026, margin: 14), "the row's deadline (1040) 14 s off")
        #expect(PendingUse(used: 1060, rowSeen: 1000, idle: 600).isDue(now: 1060, margin: 14), "60 s past the row's")
        let merged = use.merged(PendingUse(used: 1003, rowSeen: 990, idle: 600))
        #expect(merged == PendingUse(used: 1005, rowSeen: 990, idle: 600), "the latest use, the earliest row: never written later than either asks")
    }
}

extension PostgresSuites {
    @Suite("PostgreSQL last uses", .serialized)
    struct PostgresTouchTests {
        @Test("a use is written once due (its row's deadline near, or 60 s past the row's), not on every heartbeat; all of them at shutdown")
        func written() async throws {
            let start = Double(1_800_000_000)
            let clock = Mutex(start)
            let cluster = try await PostgresCluster.start()
            try await PostgresTestDatabase.with(PostgresTestDatabase.configuration(cluster)) { client in
                _ = try await SchemaMigrator(schema: .standard, appliedBy: "test", now: { 0 }, logger: PostgresTestDatabase.logger).migrate(client)
                let store = PostgresTestDatabase.store(client, cluster, timeout: .seconds(2), now: { clock.withLock { $0 } })
                let t = Int64(start), alice = Principal(issuer: "corp", sub: "alice")
                func lastSeen(_ session: Session) async throws -> String {
                    try await cluster.sql("SELECT last_seen_at FROM keyhole.sessions WHERE id = '\\x\(PostgresStoreTests.hex(session.id.bytes))'::bytea")
                }
                let long = try await store.createSession(for: alice, now: t, ttl: 86_400, idle: 600, data: nil)
                let short = try await store.createSession(for: alice, now: t, ttl: 86_400, idle: 15, data: nil)
                try await PostgresTestDatabase.shuttingDown([store]) { () async throws in
                    #expect(try await store.session(token: long.token, now: t + 5) != nil)
                    #expect(try await store.session(token: short.token, now: t + 5) != nil)
                    clock.withLock { $0 = start + 5 }
                    await store.writeTouches()
                    #expect(try await lastSeen(long.session) == "\(t)\n", "a use 5 s after the row's, its deadline far, was written on the next heartbeat")
                    #expect(try await lastSeen(short.session) == "\(t + 5)\n", "the row's deadline (t + 15) within the margin (17 s here): due")
                    #expect(try await store.session(token: long.token, now: t + 59) != nil)
                    clock.withLock { $0 = start + 59 }
                    await store.writeTouches()
                    #expect(try await lastSeen(long.session) == "\(t)\n")
                    // Past the row's deadline (t + 600): live by this host's unwritten use (t + 59) alone.
                    #expect(try await store.session(token: long.token, now: t + 620) != nil)
                    clock.withLock { $0 = start + 620 }
                    await store.writeTouches()
                    #expect(try await lastSeen(long.session) == "\(t + 620)\n", "60 s past the row's: due")
                    #expect(try await store.session(token: long.token, now: t + 625) != nil)
                    clock.withLock { $0 = start + 625 }
                    await store.writeTouches()
                    #expect(try await lastSeen(long.session) == "\(t + 620)\n")
                }
                #expect(try await lastSeen(long.session) == "\(t + 625)\n", "written at shutdown")
            }
            #expect(await cluster.close() == 0)
        }
    }
}
