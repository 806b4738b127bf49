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
        let outcome1 = pending.insert(state: Self.digest("s1"), record: Self.record())
        #expect(outcome1)
        let outcome2 = pending.take(state: Self.digest("s1"), binding: Self.digest("cookie"), now: 999) == .success(Self.record())
        #expect(outcome2)
        // A replayed callback finds nothing.
        let outcome3 = pending.take(state: Self.digest("s1"), binding: Self.digest("cookie"), now: 999) == .failure(.unknown)
        #expect(outcome3)
        #expect(pending.count == 0)
    }

    @Test func anotherBrowsersCallbackUsesTheRecordUp() {
        var pending = AppleWebPending()
        _ = pending.insert(state: Self.digest("s1"), record: Self.record())
        let outcome4 = pending.take(state: Self.digest("s1"), binding: Self.digest("other cookie"), now: 10) == .failure(.notThisBrowser)
        #expect(outcome4)
        // The right browser, after: the state was consumed by the refusal.
        let outcome5 = pending.take(state: Self.digest("s1"), binding: Self.digest("cookie"), now: 10) == .failure(.unknown)
        #expect(outcome5)
    }

    @Test func anExpiredRecordIsRefusedAndSwept() {
        var pending = AppleWebPending()
        _ = pending.insert(state: Self.digest("s1"), record: Self.record(expiresAt: 100))
        _ = pending.insert(state: Self.digest("s2"), record: Self.record(expiresAt: 100))
        _ = pending.insert(state: Self.digest("s3"), record: Self.record(expiresAt: 200))
        let outcome6 = pending.take(state: Self.digest("s1"), binding: Self.digest("cookie"), now: 100) == .failure(.expired)
        #expect(outcome6)
        #expect(pending.sweep(now: 150) == 1)
        #expect(pending.count == 1)
        let outcome7 = pending.take(state: Self.digest("s3"), binding: Self.digest("cookie"), now: 150) == .success(Self.record(expiresAt: 200))
        #expect(outcome7)
    }

    @Test func aPeerOverItsBoundLosesItsOwnOldestNotAnothersAndTheTotalIsKept() {
        var pending = AppleWebPending(configuration: .init(lifetime: 600, perPeer: 2, total: 3))
        let outcome8 = pending.insert(state: Self.digest("other"), record: Self.record(peer: 1000))
        #expect(outcome8)
        let outcome9 = pending.insert(state: Self.digest("a1"), record: Self.record(peer: 33))
        #expect(outcome9)
        let outcome10 = pending.insert(state: Self.digest("a2"), record: Self.record(peer: 33))
        #expect(outcome10)
        // Peer 33's third pushes its own first out (its bound), and the total (3) holds.
        let outcome11 = pending.insert(state: Self.digest("a3"), record: Self.record(peer: 33))
        #expect(outcome11)
        #expect(pending.count == 3)
        let outcome12 = pending.take(state: Self.digest("a1"), binding: Self.digest("cookie"), now: 0) == .failure(.unknown)
        #expect(outcome12)
        let outcome13 = pending.take(state: Self.digest("other"), binding: Self.digest("cookie"), now: 0) == .success(Self.record(peer: 1000))
        #expect(outcome13)
        // A peer with nothing pending cannot push others out when the total is reached.
        var full = AppleWebPending(configuration: .init(lifetime: 600, perPeer: 10, total: 2))
        let outcome14 = full.insert(state: Self.digest("b1"), record: Self.record(peer: 33))
        #expect(outcome14)
        let outcome15 = full.insert(state: Self.digest("b2"), record: Self.record(peer: 33))
        #expect(outcome15)
        let outcome16 = full.insert(state: Self.digest("c1"), record: Self.record(peer: 1000))
        #expect(!outcome16)
        #expect(full.count == 2)
    }

    @Test func takenStatesDoNotPileUpInAPeersQueue() {
        var pending = AppleWebPending(configuration: .init(lifetime: 600, perPeer: 3, total: 100))
        for n in 0..<1000 {
            let outcome17 = pending.insert(state: Self.digest("s\(n)"), record: Self.record())
            #expect(outcome17)
            let outcome18 = pending.take(state: Self.digest("s\(n)"), binding: Self.digest("cookie"), now: 0) == .success(Self.record())
            #expect(outcome18)
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
