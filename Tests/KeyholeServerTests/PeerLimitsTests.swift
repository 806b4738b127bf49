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
        limits.closeConnection(uid: 1000)
        #expect(limits.connections(of: 1000) == 1)
        #expect(open(&limits, uid: 1000, limit: 2))
        // A refused connection was not counted, so closing the others empties the entry.
        limits.closeConnection(uid: 1000)
        limits.closeConnection(uid: 1000)
        #expect(limits.connections(of: 1000) == 0)
        limits.closeConnection(uid: 1000)
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

    @Test("a uid whose connections all closed starts again with a full bucket")
    func forgottenWhenGone() {
        let now = NIODeadline.uptimeNanoseconds(5_000_000_000)
        var limits = PeerLimits()
        _ = limits.openConnection(uid: 9, limit: 10)
        #expect(take(&limits, uid: 9, now: now, rate: 1, burst: 1) == nil)
        #expect(take(&limits, uid: 9, now: now, rate: 1, burst: 1) != nil)
        limits.closeConnection(uid: 9)
        _ = limits.openConnection(uid: 9, limit: 10)
        #expect(take(&limits, uid: 9, now: now, rate: 1, burst: 1) == nil)
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
