import NIOCore
import Testing

@testable import KeyholeServer

/// Mutating calls made outside `#expect`, which cannot take them.
private func open(
    _ limits: inout PeerLimits, uid: UInt32, limit: Int, now: NIODeadline = .uptimeNanoseconds(0), rates: PeerLimits.Rates = .init()
) -> Bool {
    limits.openConnection(uid: uid, limit: limit, now: now, rates: rates) == .admitted
}

private func take(_ limits: inout PeerLimits, uid: UInt32, now: NIODeadline, rate: Double, burst: Double) -> TimeAmount? {
    limits.takeRequest(uid: uid, now: now, rates: PeerLimits.Rates(requests: rate, requestBurst: burst))
}

private func hold(_ limits: inout PeerLimits, uid: UInt32) -> Bool {
    limits.holdRefusal(uid: uid)
}

extension PeerLimits {
    /// `closeConnection` with a request rate only.
    fileprivate mutating func closeConnection(uid: UInt32, now: NIODeadline, rate: Double, burst: Double, holding: NIODeadline? = nil) {
        closeConnection(uid: uid, now: now, rates: Rates(requests: rate, requestBurst: burst), holding: holding)
    }
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
        _ = open(&limits, uid: 7, limit: 10)
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
        _ = open(&limits, uid: 1, limit: 10)
        _ = open(&limits, uid: 2, limit: 10)
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
        _ = open(&limits, uid: 9, limit: 10)
        #expect(take(&limits, uid: 9, now: start, rate: 1, burst: 2) == nil)
        #expect(take(&limits, uid: 9, now: start, rate: 1, burst: 2) == nil)
        #expect(take(&limits, uid: 9, now: start, rate: 1, burst: 2) == .seconds(1))
        limits.closeConnection(uid: 9, now: start, rate: 1, burst: 2)
        #expect(limits.connections(of: 9) == 0 && limits.uids == 1, "kept: its bucket is empty")
        _ = open(&limits, uid: 9, limit: 10)
        #expect(take(&limits, uid: 9, now: start + .milliseconds(500), rate: 1, burst: 2) == .milliseconds(500), "not refilled by reconnecting")
        // Half refilled at +1.5 s: still kept.
        limits.closeConnection(uid: 9, now: start + .milliseconds(1500), rate: 1, burst: 2)
        #expect(limits.uids == 1)
        _ = open(&limits, uid: 9, limit: 10)
        #expect(take(&limits, uid: 9, now: start + .milliseconds(1500), rate: 1, burst: 2) == nil)
        #expect(take(&limits, uid: 9, now: start + .milliseconds(1500), rate: 1, burst: 2) != nil)
        // Closed with the bucket full by then (+3.5 s: two tokens back): forgotten at once, and a new
        // connection starts with a full bucket.
        limits.closeConnection(uid: 9, now: start + .milliseconds(3500), rate: 1, burst: 2)
        #expect(limits.uids == 0)
        _ = open(&limits, uid: 9, limit: 10)
        #expect(take(&limits, uid: 9, now: start + .milliseconds(3500), rate: 1, burst: 2) == nil)
        #expect(take(&limits, uid: 9, now: start + .milliseconds(3500), rate: 1, burst: 2) == nil)
        // Without a rate no bucket is kept.
        _ = open(&limits, uid: 10, limit: 10)
        limits.closeConnection(uid: 10, now: start, rate: 0, burst: 1)
        #expect(limits.connections(of: 10) == 0 && limits.uids == 1, "uid 9 still has its connection")
    }

    @Test("uids left with refilling buckets are forgotten once full, by a later close of any uid (at most once a second)")
    func sweptWhenFull() {
        let start = NIODeadline.uptimeNanoseconds(5_000_000_000)
        var limits = PeerLimits()
        for uid in UInt32(1)...100 {
            _ = open(&limits, uid: uid, limit: 10)
            #expect(take(&limits, uid: uid, now: start, rate: 10, burst: 10) == nil)
            limits.closeConnection(uid: uid, now: start, rate: 10, burst: 10)
        }
        #expect(limits.uids == 100, "each bucket is one token short")
        _ = open(&limits, uid: 500, limit: 10)
        limits.closeConnection(uid: 500, now: start + .milliseconds(50), rate: 10, burst: 10)
        #expect(limits.uids == 100, "not full yet at +50 ms (nor looked at again within the second)")
        _ = open(&limits, uid: 500, limit: 10)
        limits.closeConnection(uid: 500, now: start + .seconds(2), rate: 10, burst: 10)
        #expect(limits.uids == 0)
    }

    @Test("a connection closed after a frame error keeps its slot until its hold is up: churning runs into the limit, and is refused without waiting")
    func heldAfterFrameErrors() {
        let start = NIODeadline.uptimeNanoseconds(5_000_000_000)
        var limits = PeerLimits()
        for step in 0..<3 {
            let now = start + .milliseconds(Int64(step) * 10)
            #expect(open(&limits, uid: 33, limit: 3, now: now))
            limits.closeConnection(uid: 33, now: now, rate: 0, burst: 1, holding: now + .seconds(1))
        }
        #expect(limits.connections(of: 33) == 0 && limits.held(of: 33) == 3)
        #expect(limits.openConnection(uid: 33, limit: 3, now: start + .milliseconds(500), rates: .init()) == .atLimit(connections: 0, held: 3))
        #expect(open(&limits, uid: 34, limit: 3, now: start + .milliseconds(500)), "another uid is not held back")
        // The first hold ends at +1 s: one slot back, the others still held.
        #expect(open(&limits, uid: 33, limit: 3, now: start + .seconds(1)))
        #expect(limits.held(of: 33) == 2)
        #expect(limits.openConnection(uid: 33, limit: 3, now: start + .seconds(1), rates: .init()) == .atLimit(connections: 1, held: 2))
        // A close without a frame error holds nothing; a hold that is already over holds nothing.
        limits.closeConnection(uid: 33, now: start + .seconds(1), rate: 0, burst: 1, holding: start)
        #expect(limits.connections(of: 33) == 0 && limits.held(of: 33) == 2)
        // Every hold over: the uid is forgotten by the next sweep.
        #expect(open(&limits, uid: 34, limit: 3, now: start + .seconds(5)))
        limits.closeConnection(uid: 34, now: start + .seconds(5), rate: 0, burst: 1)
        limits.closeConnection(uid: 34, now: start + .seconds(5), rate: 0, burst: 1)
        #expect(limits.uids == 0)
    }

    @Test("holds kept in order whatever their lengths (a reload may shorten them): the soonest is freed first")
    func holdsInOrder() {
        let start = NIODeadline.uptimeNanoseconds(5_000_000_000)
        var limits = PeerLimits()
        for _ in 0..<2 { _ = open(&limits, uid: 5, limit: 10, now: start) }
        limits.closeConnection(uid: 5, now: start, rate: 0, burst: 1, holding: start + .seconds(10))
        limits.closeConnection(uid: 5, now: start, rate: 0, burst: 1, holding: start + .seconds(1))
        #expect(limits.openConnection(uid: 5, limit: 2, now: start + .seconds(2), rates: .init()) == .admitted)
        #expect(limits.openConnection(uid: 5, limit: 2, now: start + .seconds(2), rates: .init()) == .atLimit(connections: 1, held: 1))
    }

    @Test("refused connections held open: at most refusalsHeldPerUID per uid; each released when it closes; a uid holding any is kept")
    func refusalsHeld() {
        let now = NIODeadline.uptimeNanoseconds(5_000_000_000)
        var limits = PeerLimits()
        for _ in 0..<PeerLimits.refusalsHeldPerUID { #expect(hold(&limits, uid: 33)) }
        #expect(!hold(&limits, uid: 33), "past the bound: closed at once")
        #expect(hold(&limits, uid: 34), "another uid has its own")
        limits.releaseRefusal(uid: 33, now: now, rates: .init())
        #expect(hold(&limits, uid: 33))
        for _ in 0..<PeerLimits.refusalsHeldPerUID { limits.releaseRefusal(uid: 33, now: now, rates: .init()) }
        #expect(limits.uids == 1, "uid 34 still holds one")
        limits.releaseRefusal(uid: 34, now: now, rates: .init())
        #expect(limits.uids == 0)
    }

    @Test("new connections per second: a burst, then one per 1/rate seconds with the wait; a refused one takes nothing; closing does not refill")
    func connectionRate() {
        let start = NIODeadline.uptimeNanoseconds(5_000_000_000)
        let rates = PeerLimits.Rates(connections: 10, connectionBurst: 3)
        var limits = PeerLimits()
        for _ in 0..<3 { #expect(open(&limits, uid: 8, limit: 100, now: start, rates: rates)) }
        #expect(limits.openConnection(uid: 8, limit: 100, now: start, rates: rates) == .overRate(.milliseconds(100)))
        #expect(limits.openConnection(uid: 8, limit: 100, now: start + .milliseconds(50), rates: rates) == .overRate(.milliseconds(50)))
        #expect(limits.connections(of: 8) == 3)
        for _ in 0..<3 { limits.closeConnection(uid: 8, now: start + .milliseconds(60), rates: rates) }
        #expect(limits.uids == 1, "kept while its bucket refills")
        #expect(open(&limits, uid: 8, limit: 100, now: start + .milliseconds(100), rates: rates))
        #expect(!open(&limits, uid: 8, limit: 100, now: start + .milliseconds(100), rates: rates))
        #expect(open(&limits, uid: 9, limit: 100, now: start, rates: rates), "uids have buckets of their own")
        // The connection limit is looked at first: a uid at it is told so, whatever its rate.
        #expect(limits.openConnection(uid: 8, limit: 1, now: start + .seconds(10), rates: rates) == .atLimit(connections: 1, held: 0))
    }

    @Test("limits are validated")
    func validation() {
        var configuration = KeyholeServer.Configuration()
        #expect(configuration.maxUnsentBytes == 1 << 20)
        #expect(configuration.maxConnectionsPerUID == 256)
        #expect(configuration.requestsPerSecondPerUID == 0)
        #expect(configuration.connectionsPerSecondPerUID == 0 && configuration.frameErrorHold == .seconds(1))
        configuration.requestsPerSecondPerUID = 50
        configuration.connectionsPerSecondPerUID = 20
        #expect(configuration.peerRates == PeerLimits.Rates(requests: 50, requestBurst: 50, connections: 20, connectionBurst: 20))
        configuration.requestsPerSecondPerUID = 0.5
        configuration.connectionBurstPerUID = 7
        #expect(configuration.peerRates == PeerLimits.Rates(requests: 0.5, requestBurst: 1, connections: 20, connectionBurst: 7))
        #expect(throws: Never.self) { try configuration.validate() }
        for change in [
            { (c: inout KeyholeServer.Configuration) in c.maxUnsentBytes = 65_535 },
            { $0.maxConnectionsPerUID = 0 },
            { $0.requestsPerSecondPerUID = -1 },
            { $0.requestsPerSecondPerUID = .infinity },
            { $0.requestBurstPerUID = 0.5 },
            { $0.connectionsPerSecondPerUID = -1 },
            { $0.connectionBurstPerUID = 0 },
            { $0.frameErrorHold = .milliseconds(-1) },
        ] {
            var bad = KeyholeServer.Configuration()
            change(&bad)
            #expect(throws: ServerError.self) { try bad.validate() }
        }
    }
}
