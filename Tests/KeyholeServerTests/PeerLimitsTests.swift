import NIOCore
import Testing

@testable import KeyholeServer

/// Mutating calls made outside `#expect`, which cannot take them.
private func open(_ limits: inout PeerLimits, uid: UInt32, limit: Int) -> Bool {
    limits.openConnection(uid: uid, limit: limit)
}

private func take(_ limits: inout PeerLimits, uid: UInt32, now: NIODeadline, rate: Double, burst: Double) -> TimeAmount? {
    limits.takeRequest(uid: uid, now: now, rate: rate, burst: burst)
}

@Suite("Per-uid limits")
struct PeerLimitsTests {
    @Test("a uid may hold its limit of connections; a closed one makes room; uids are counted apart")
    func connections() {
        var limits = PeerLimits()
        #expect(open(&limits, uid: 1000, limit: 2))
        #expect(open(&limits, uid: 1000, limit: 2))
        #expect(!open(&limits, uid: 1000, limit: 2))
        #expect(limits.connections(of: 1000) == 2)
        #expect(open(&limits, uid: 1001, limit: 2))
        limits.closeConnection(uid: 1000, now: .uptimeNanoseconds(0), rate: 0, burst: 1)
        #expect(limits.connections(of: 1000) == 1)
        #expect(open(&limits, uid: 1000, limit: 2))
        // A refused connection was not counted, so closing the others empties the entry.
        limits.closeConnection(uid: 1000, now: .uptimeNanoseconds(0), rate: 0, burst: 1)
        limits.closeConnection(uid: 1000, now: .uptimeNanoseconds(0), rate: 0, burst: 1)
        #expect(limits.connections(of: 1000) == 0)
        limits.closeConnection(uid: 1000, now: .uptimeNanoseconds(0), rate: 0, burst: 1)
        #expect(limits.connections(of: 1000) == 0)
        #expect(limits.connections(of: 1001) == 1)
    }

    @Test("the bucket lets a burst through, then one request per 1/rate seconds, and says how long to wait")
    func bucket() {
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
        var limits = PeerLimits()
        _ = limits.openConnection(uid: 7, limit: 10)
        for _ in 0..<3 { #expect(take(&limits, uid: 7, now: start, rate: 10, burst: 3) == nil) }
        #expect(take(&limits, uid: 7, now: start, rate: 10, burst: 3) == .milliseconds(100))
        // Half a token later: half the wait is left, and nothing was taken by asking.
        #expect(take(&limits, uid: 7, now: start + .milliseconds(50), rate: 10, burst: 3) == .milliseconds(50))
        #expect(take(&limits, uid: 7, now: start + .milliseconds(100), rate: 10, burst: 3) == nil)
        #expect(take(&limits, uid: 7, now: start + .milliseconds(100), rate: 10, burst: 3) != nil)
        // A long quiet spell refills to the burst, never beyond.
        let later = start + .seconds(60)
        for _ in 0..<3 { #expect(take(&limits, uid: 7, now: later, rate: 10, burst: 3) == nil) }
        #expect(take(&limits, uid: 7, now: later, rate: 10, burst: 3) != nil)
    }

    @Test("without a rate nothing is limited; uids have buckets of their own; an unknown uid is not limited")
    func bucketsApart() {
        let now = NIODeadline.uptimeNanoseconds(5_000_000_000)
        var limits = PeerLimits()
        _ = limits.openConnection(uid: 1, limit: 10)
        _ = limits.openConnection(uid: 2, limit: 10)
        for _ in 0..<100 { #expect(take(&limits, uid: 1, now: now, rate: 0, burst: 1) == nil) }
        #expect(take(&limits, uid: 1, now: now, rate: 1, burst: 1) == nil)
        #expect(take(&limits, uid: 1, now: now, rate: 1, burst: 1) == .seconds(1))
        #expect(take(&limits, uid: 2, now: now, rate: 1, burst: 1) == nil)
        #expect(take(&limits, uid: 3, now: now, rate: 1, burst: 1) == nil)
        #expect(take(&limits, uid: 3, now: now, rate: 1, burst: 1) == nil)
    }

    @Test("a uid whose connections all closed keeps its bucket until it would be full again: reconnecting does not refill it; then it is forgotten")
    func keptWhileRefilling() {
        let start = NIODeadline.uptimeNanoseconds(5_000_000_000)
        var limits = PeerLimits()
        _ = limits.openConnection(uid: 9, limit: 10)
        #expect(take(&limits, uid: 9, now: start, rate: 1, burst: 2) == nil)
        #expect(take(&limits, uid: 9, now: start, rate: 1, burst: 2) == nil)
        #expect(take(&limits, uid: 9, now: start, rate: 1, burst: 2) == .seconds(1))
        limits.closeConnection(uid: 9, now: start, rate: 1, burst: 2)
        #expect(limits.connections(of: 9) == 0 && limits.uids == 1, "kept: its bucket is empty")
        _ = limits.openConnection(uid: 9, limit: 10)
        #expect(take(&limits, uid: 9, now: start + .milliseconds(500), rate: 1, burst: 2) == .milliseconds(500), "not refilled by reconnecting")
        // Half refilled at +1.5 s: still kept.
        limits.closeConnection(uid: 9, now: start + .milliseconds(1500), rate: 1, burst: 2)
        #expect(limits.uids == 1)
        _ = limits.openConnection(uid: 9, limit: 10)
        #expect(take(&limits, uid: 9, now: start + .milliseconds(1500), rate: 1, burst: 2) == nil)
        #expect(take(&limits, uid: 9, now: start + .milliseconds(1500), rate: 1, burst: 2) != nil)
        // Closed with the bucket full by then (+3.5 s: two tokens back): forgotten at once, and a new
        // connection starts with a full bucket.
        limits.closeConnection(uid: 9, now: start + .milliseconds(3500), rate: 1, burst: 2)
        #expect(limits.uids == 0)
        _ = limits.openConnection(uid: 9, limit: 10)
        #expect(take(&limits, uid: 9, now: start + .milliseconds(3500), rate: 1, burst: 2) == nil)
        #expect(take(&limits, uid: 9, now: start + .milliseconds(3500), rate: 1, burst: 2) == nil)
        // Without a rate no bucket is kept.
        _ = limits.openConnection(uid: 10, limit: 10)
        limits.closeConnection(uid: 10, now: start, rate: 0, burst: 1)
        #expect(limits.connections(of: 10) == 0 && limits.uids == 1, "uid 9 still has its connection")
    }

    @Test("uids left with refilling buckets are forgotten once full, by a later close of any uid (at most once a second)")
    func sweptWhenFull() {
        let start = NIODeadline.uptimeNanoseconds(5_000_000_000)
        var limits = PeerLimits()
        for uid in UInt32(1)...100 {
            _ = limits.openConnection(uid: uid, limit: 10)
            #expect(take(&limits, uid: uid, now: start, rate: 10, burst: 10) == nil)
            limits.closeConnection(uid: uid, now: start, rate: 10, burst: 10)
        }
        #expect(limits.uids == 100, "each bucket is one token short")
        _ = limits.openConnection(uid: 500, limit: 10)
        limits.closeConnection(uid: 500, now: start + .milliseconds(50), rate: 10, burst: 10)
        #expect(limits.uids == 100, "not full yet at +50 ms (nor looked at again within the second)")
        _ = limits.openConnection(uid: 500, limit: 10)
        limits.closeConnection(uid: 500, now: start + .seconds(2), rate: 10, burst: 10)
        #expect(limits.uids == 0)
    }

    @Test("limits are validated")
    func validation() {
        var configuration = KeyholeServer.Configuration()
        #expect(configuration.maxUnsentBytes == 1 << 20)
        #expect(configuration.maxConnectionsPerUID == 256)
        #expect(configuration.requestsPerSecondPerUID == 0)
        configuration.requestsPerSecondPerUID = 50
        #expect(configuration.effectiveRequestBurstPerUID == 50)
        configuration.requestsPerSecondPerUID = 0.5
        #expect(configuration.effectiveRequestBurstPerUID == 1)
        #expect(throws: Never.self) { try configuration.validate() }
        for change in [
            { (c: inout KeyholeServer.Configuration) in c.maxUnsentBytes = 65_535 },
            { $0.maxConnectionsPerUID = 0 },
            { $0.requestsPerSecondPerUID = -1 },
            { $0.requestsPerSecondPerUID = .infinity },
            { $0.requestBurstPerUID = 0.5 },
        ] {
            var bad = KeyholeServer.Configuration()
            change(&bad)
            #expect(throws: ServerError.self) { try bad.validate() }
        }
    }
}
