import KeyholeJOSE
import Testing

@testable import KeyholeServer

@Suite struct AppleWebPendingTests {
    static func digest(_ text: String) -> SHA256.Digest { SHA256.digest(utf8: text)! }

    static func record(peer: UInt32 = 33, expiresAt: Int64 = 1_000, binding: String = "cookie") -> AppleWebPending.Record {
        AppleWebPending.Record(
            binding: digest(binding), nonce: digest("nonce"), clientID: "com.example.web", redirectURI: "https://example.com/apple/callback",
            returnTo: "/", peer: peer, expiresAt: expiresAt)
    }

    @Test func aRecordIsTakenOnceWithItsBinding() {
        var pending = AppleWebPending()
        let inserted = pending.insert(state: Self.digest("s1"), record: Self.record())
        #expect(inserted)
        let taken = pending.take(state: Self.digest("s1"), binding: Self.digest("cookie"), now: 999) == .success(Self.record())
        #expect(taken)
        // A replayed callback finds nothing.
        let taken2 = pending.take(state: Self.digest("s1"), binding: Self.digest("cookie"), now: 999) == .failure(.unknown)
        #expect(taken2)
        #expect(pending.count == 0)
    }

    @Test func anotherBrowsersCallbackUsesTheRecordUp() {
        var pending = AppleWebPending()
        _ = pending.insert(state: Self.digest("s1"), record: Self.record())
        let taken = pending.take(state: Self.digest("s1"), binding: Self.digest("other cookie"), now: 10) == .failure(.notThisBrowser)
        #expect(taken)
        // The right browser, after: the state was consumed by the refusal.
        let taken2 = pending.take(state: Self.digest("s1"), binding: Self.digest("cookie"), now: 10) == .failure(.unknown)
        #expect(taken2)
    }

    @Test func anExpiredRecordIsRefusedAndSwept() {
        var pending = AppleWebPending()
        _ = pending.insert(state: Self.digest("s1"), record: Self.record(expiresAt: 100))
        _ = pending.insert(state: Self.digest("s2"), record: Self.record(expiresAt: 100))
        _ = pending.insert(state: Self.digest("s3"), record: Self.record(expiresAt: 200))
        let taken = pending.take(state: Self.digest("s1"), binding: Self.digest("cookie"), now: 100) == .failure(.expired)
        #expect(taken)
        #expect(pending.sweep(now: 150) == 1)
        #expect(pending.count == 1)
        let taken2 = pending.take(state: Self.digest("s3"), binding: Self.digest("cookie"), now: 150) == .success(Self.record(expiresAt: 200))
        #expect(taken2)
    }

    @Test func aSweepReadsEachPeersQueueFromItsFrontOnly() {
        var pending = AppleWebPending()
        for (n, peer) in [(1, UInt32(1)), (2, 2), (3, 1), (4, 2), (5, 1)] {
            _ = pending.insert(state: Self.digest("s\(n)"), record: Self.record(peer: peer, expiresAt: Int64(n * 100)))
        }
        // One taken from the middle of peer 1's queue: skipped when met.
        #expect(pending.take(state: Self.digest("s3"), binding: Self.digest("cookie"), now: 0) == .success(Self.record(peer: 1, expiresAt: 300)))
        #expect(pending.sweep(now: 99) == 0)
        #expect(pending.sweep(now: 400) == 3)  // s1, s2, s4 (s3 was taken)
        #expect(pending.count == 1)
        #expect(pending.take(state: Self.digest("s5"), binding: Self.digest("cookie"), now: 400) == .success(Self.record(peer: 1, expiresAt: 500)))
        #expect(pending.sweep(now: 10_000) == 0 && pending.count == 0)
    }

    @Test func aPeerOverItsBoundLosesItsOwnOldestNotAnothersAndTheTotalIsKept() {
        var pending = AppleWebPending(configuration: .init(perPeer: 2, total: 3))
        let inserted = pending.insert(state: Self.digest("other"), record: Self.record(peer: 1000))
        #expect(inserted)
        let inserted2 = pending.insert(state: Self.digest("a1"), record: Self.record(peer: 33))
        #expect(inserted2)
        let inserted3 = pending.insert(state: Self.digest("a2"), record: Self.record(peer: 33))
        #expect(inserted3)
        // Peer 33's third pushes its own first out (its bound), and the total (3) holds.
        let inserted4 = pending.insert(state: Self.digest("a3"), record: Self.record(peer: 33))
        #expect(inserted4)
        #expect(pending.count == 3)
        let taken = pending.take(state: Self.digest("a1"), binding: Self.digest("cookie"), now: 0) == .failure(.unknown)
        #expect(taken)
        let taken2 = pending.take(state: Self.digest("other"), binding: Self.digest("cookie"), now: 0) == .success(Self.record(peer: 1000))
        #expect(taken2)
        // A peer with nothing pending cannot push others out when the total is reached.
        var full = AppleWebPending(configuration: .init(perPeer: 10, total: 2))
        let inserted5 = full.insert(state: Self.digest("b1"), record: Self.record(peer: 33))
        #expect(inserted5)
        let inserted6 = full.insert(state: Self.digest("b2"), record: Self.record(peer: 33))
        #expect(inserted6)
        let inserted7 = full.insert(state: Self.digest("c1"), record: Self.record(peer: 1000))
        #expect(!inserted7)
        #expect(full.count == 2)
    }

    @Test func takenStatesDoNotPileUpInAPeersQueue() {
        var pending = AppleWebPending(configuration: .init(perPeer: 3, total: 100))
        for n in 0..<1000 {
            let inserted = pending.insert(state: Self.digest("s\(n)"), record: Self.record())
            #expect(inserted)
            let taken = pending.take(state: Self.digest("s\(n)"), binding: Self.digest("cookie"), now: 0) == .success(Self.record())
            #expect(taken)
        }
        #expect(pending.count == 0)
        // After all that, the bound still counts live records only.
        for n in 0..<3 {
            let inserted = pending.insert(state: Self.digest("t\(n)"), record: Self.record())
            #expect(inserted)
        }
        #expect(pending.count == 3)
    }

    @Test func digestsCompareByEveryWord() {
        let a = Self.digest("a")
        #expect(AppleWebPending.equalInConstantTime(a, Self.digest("a")))
        #expect(!AppleWebPending.equalInConstantTime(a, Self.digest("b")))
    }
}
