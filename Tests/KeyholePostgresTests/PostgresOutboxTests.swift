import KeyholePostgres
import KeyholeProtocol
import KeyholeStore
import KeyholeTestSupport
import PostgresNIO
import Testing

extension PostgresSuites {
    /// The outbox across hosts (POSTGRES.md, "The Apple outbox across hosts"): two stores on one
    /// database, as two keyholed processes; times are the test's.
    @Suite("outbox across hosts", .serialized)
    struct PostgresOutboxTests {
        static let now: Int64 = 1_800_000_000

        static func withHosts(_ body: @escaping @Sendable (PostgresStore, PostgresStore) async throws -> Void) async throws {
            let cluster = try await PostgresCluster.start()
            try await PostgresTestDatabase.withTwo(cluster) { clientA, clientB in
                let (a, b) = (PostgresTestDatabase.store(clientA, cluster, host: "a"), PostgresTestDatabase.store(clientB, cluster, host: "b"))
                try await PostgresTestDatabase.shuttingDown([a, b]) { try await body(a, b) }
            }
            #expect(await cluster.close() == 0)
        }

        @Test("two hosts claiming at once never get the same entry; together they get all; other kinds and undue work stay")
        func disjointClaims() async throws {
            try await Self.withHosts { a, b in
                var added: Set<UInt64> = []
                for n in 0..<40 { added.insert(try await a.addOutbox(kind: "apple.revoke", payload: ["n": .int(Int64(n))], now: Self.now).id) }
                _ = try await a.addOutbox(kind: "other", payload: [:], now: Self.now)
                _ = try await a.addOutbox(kind: "apple.revoke", payload: [:], now: Self.now + 100)  // not due: created later
                let (fromA, fromB) = try await withThrowingTaskGroup(of: (String, [UInt64]).self) { group in
                    for (name, store) in [("a", a), ("b", b)] {
                        group.addTask {
                            var mine: [UInt64] = []
                            while true {
                                let batch = try await store.claimOutbox(kind: "apple.revoke", limit: 3, lease: 60, now: Self.now)
                                if batch.isEmpty { return (name, mine) }
                                mine += batch.map(\.entry.id)
                            }
                        }
                    }
                    var claims: [String: [UInt64]] = [:]
                    for try await (name, ids) in group { claims[name] = ids }
                    return (claims["a"]!, claims["b"]!)
                }
                #expect(Set(fromA).isDisjoint(with: fromB), "an entry claimed by both hosts")
                #expect(Set(fromA).union(fromB) == added)
                #expect(fromA.count + fromB.count == 40)
            }
        }

        @Test("a lease held keeps the work from others; run out (the host died), another host takes it; the dead host's late completion deletes nothing")
        func leaseTakenOver() async throws {
            try await Self.withHosts { a, b in
                let entry = try await a.addOutbox(kind: "apple.revoke", payload: ["sub": "001234.x"], now: Self.now)
                let claimed = try await a.claimOutbox(kind: "apple.revoke", limit: 10, lease: 60, now: Self.now)
                #expect(claimed == [PostgresStore.ClaimedWork(entry: entry, attempts: 0)])
                #expect(try await b.claimOutbox(kind: "apple.revoke", limit: 10, lease: 60, now: Self.now + 59).isEmpty)
                let taken = try await b.claimOutbox(kind: "apple.revoke", limit: 10, lease: 60, now: Self.now + 60)
                #expect(taken.map(\.entry) == [entry])
                #expect(try await a.completeOutbox(entry.id) == false, "A's lease was taken: A deletes nothing")
                #expect(try await b.completeOutbox(entry.id))
                #expect(try await a.claimOutbox(kind: "apple.revoke", limit: 10, lease: 60, now: Self.now + 1000).isEmpty, "done: gone")
            }
        }

        @Test("a failure reschedules: not due before retry_after, then claimable by any host with its attempts counted")
        func failureRetried() async throws {
            try await Self.withHosts { a, b in
                let entry = try await a.addOutbox(kind: "apple.revoke", payload: [:], now: Self.now)
                _ = try await a.claimOutbox(kind: "apple.revoke", limit: 1, lease: 60, now: Self.now)
                try await a.failOutbox(entry.id, retryAfter: 10, now: Self.now + 1)
                #expect(try await b.claimOutbox(kind: "apple.revoke", limit: 1, lease: 60, now: Self.now + 10).isEmpty)
                let again = try await b.claimOutbox(kind: "apple.revoke", limit: 1, lease: 60, now: Self.now + 11)
                #expect(again == [PostgresStore.ClaimedWork(entry: entry, attempts: 1)])
                // A, no longer the owner, cannot reschedule B's claim away.
                try await a.failOutbox(entry.id, retryAfter: 1000, now: Self.now + 12)
                #expect(try await b.completeOutbox(entry.id))
            }
        }
    }
}
