@testable import KeyholePostgres
import KeyholeStore
import Testing

/// The cache's rules (POSTGRES.md, "Reads"), without I/O: time is the test's.
@Suite("session cache state")
struct SessionCacheStateTests {
    static let check = SessionCheck(bytes: [UInt8](repeating: 7, count: 16))!

    static func session(_ n: UInt64, sub: String = "alice") -> Session {
        Session(id: SessionID(high: n, low: n), principal: Principal(issuer: "corp", sub: sub), createdAt: 0, expiresAt: 10_000,
            lastSeenAt: 0, idleSeconds: 10_000, data: nil)
    }

    /// A cache whose listener is connected and has heard a heartbeat sent at `at`.
    static func fresh(capacity: Int = 100, at: Double = 100, remembered: Int = 4096) -> SessionCacheState {
        var state = SessionCacheState(capacity: capacity, maxStaleness: 2, remembered: remembered)
        state.listenerConnected()
        state.sent(heartbeat: 1, at: at)
        state.heard(heartbeat: 1)
        return state
    }

    static func ticket(_ state: inout SessionCacheState, _ id: SessionID, now: Double) -> SessionCacheState.FillTicket? {
        if case .miss(let ticket) = state.lookup(id, now: now) { return ticket }
        return nil
    }

    static func isHit(_ state: inout SessionCacheState, _ id: SessionID, now: Double) -> Bool {
        if case .hit = state.lookup(id, now: now) { return true }
        return false
    }

    @Test("not used until the listener is connected and has heard a heartbeat sent since; then for max_staleness after that heartbeat was sent")
    func freshness() {
        var state = SessionCacheState(capacity: 10, maxStaleness: 2)
        let id = Self.session(1).id
        guard case .bypass = state.lookup(id, now: 0) else { Issue.record("used before the listener connected"); return }
        state.sent(heartbeat: 1, at: 0)
        state.listenerConnected()
        state.heard(heartbeat: 1)
        #expect(!state.isFresh(now: 0), "a heartbeat sent before the connection proves nothing about it")
        state.sent(heartbeat: 2, at: 10)
        #expect(!state.isFresh(now: 10.5), "sent, not heard yet")
        state.heard(heartbeat: 2)
        #expect(state.isFresh(now: 11.9))
        #expect(!state.isFresh(now: 12), "max_staleness after it was sent, not after it was heard")
        // A later heartbeat heard moves it; an older one heard late does not move it back.
        state.sent(heartbeat: 3, at: 11)
        state.sent(heartbeat: 4, at: 11.5)
        state.heard(heartbeat: 4)
        state.heard(heartbeat: 3)
        #expect(state.isFresh(now: 13.4) && !state.isFresh(now: 13.5))
        state.listenerLost()
        #expect(!state.isFresh(now: 11.6))
    }

    @Test("a fill is kept and hit; a revoke, the user's change or '*' drops it; an unknown payload drops everything")
    func invalidation() {
        var state = Self.fresh()
        let a = Self.session(1), b = Self.session(2), c = Self.session(3, sub: "bob")
        for session in [a, b, c] {
            let ticket = Self.ticket(&state, session.id, now: 100)!
            let kept = state.fill(ticket, session: session, check: Self.check, user: nil, userKey: "u:" + session.principal.sub, now: 100)
            #expect(kept)
        }
        var hits = [Self.isHit(&state, a.id, now: 100.5)]
        state.heard(SessionCacheState.sessionKey(a.id))
        hits += [Self.isHit(&state, a.id, now: 100.5), Self.isHit(&state, b.id, now: 100.5)]
        state.heard("u:alice")
        hits += [Self.isHit(&state, b.id, now: 100.5), Self.isHit(&state, c.id, now: 100.5)]
        #expect(hits == [true, false, true, false, true])
        state.heard("x:from-a-newer-keyholed")
        #expect(state.count == 0)
    }

    @Test("a fill that raced an invalidation of its session, its user or everything is not kept; one that raced another's is")
    func racingFills() {
        for (payload, kept) in [("s:" + PostgresRows.hex(Self.session(1).id.bytes), false), ("u:alice", false), ("*", false),
            ("s:" + PostgresRows.hex(Self.session(9).id.bytes), true), ("u:bob", true)]
        {
            var state = Self.fresh()
            let session = Self.session(1)
            let ticket = Self.ticket(&state, session.id, now: 100)!
            state.heard(payload)  // while the read was on its way
            let filled = state.fill(ticket, session: session, check: Self.check, user: nil, userKey: "u:alice", now: 100)
            #expect(filled == kept, "\(payload)")
        }
        // More invalidations than remembered since the ticket: cannot tell, not kept.
        var state = Self.fresh(remembered: 4)
        let ticket = Self.ticket(&state, Self.session(1).id, now: 100)!
        for n in 10..<16 { state.heard("u:other\(n)") }
        let tooMany = state.fill(ticket, session: Self.session(1), check: Self.check, user: nil, userKey: "u:alice", now: 100)
        #expect(!tooMany)
        // A reconnection since the ticket: not kept.
        var reconnected = Self.fresh()
        let before = Self.ticket(&reconnected, Self.session(1).id, now: 100)!
        reconnected.listenerConnected()
        reconnected.sent(heartbeat: 7, at: 100)
        reconnected.heard(heartbeat: 7)
        let afterReconnect = reconnected.fill(before, session: Self.session(1), check: Self.check, user: nil, userKey: "u:alice", now: 100)
        #expect(!afterReconnect)
    }

    @Test("bounded: never more than capacity; what is used stays, what is not goes first")
    func capacity() {
        var state = Self.fresh(capacity: 10)
        for n: UInt64 in 1...10 {
            let ticket = Self.ticket(&state, Self.session(n).id, now: 100)!
            state.fill(ticket, session: Self.session(n), check: Self.check, user: nil, userKey: "u:alice", now: 100)
            #expect(state.count <= 10)
            // Session 1 is used after every fill: it stays.
            let stays = Self.isHit(&state, Self.session(1).id, now: 100)
            #expect(stays)
        }
        for n: UInt64 in 11...40 {
            let ticket = Self.ticket(&state, Self.session(n).id, now: 100)!
            state.fill(ticket, session: Self.session(n), check: Self.check, user: nil, userKey: "u:alice", now: 100)
            #expect(state.count <= 10)
            let stays = Self.isHit(&state, Self.session(1).id, now: 100)
            #expect(stays)
        }
        let gone = !Self.isHit(&state, Self.session(2).id, now: 100)
        #expect(gone, "unused for generations: gone")
        // The user index follows evictions: a user invalidation after many evictions drops exactly theirs.
        state.heard("u:alice")
        #expect(state.count == 0)
    }

    @Test("heartbeats: this host's proves freshness, another host's is neither a heartbeat nor an invalidation")
    func heartbeats() {
        var state = SessionCacheState(capacity: 10, maxStaleness: 2)
        state.listenerConnected()
        state.sent(heartbeat: 5, at: 100)
        state.heard(notification: "h:host-b:5", host: "host-a")
        #expect(!state.isFresh(now: 100.1), "another host's heartbeat 5 is not ours")
        state.heard(notification: "h:host-a:5", host: "host-a")
        #expect(state.isFresh(now: 100.1))
        let ticket = Self.ticket(&state, Self.session(1).id, now: 100.1)!
        _ = state.fill(ticket, session: Self.session(1), check: Self.check, user: nil, userKey: "u:alice", now: 100.1)
        state.heard(notification: "h:host-b:9", host: "host-a")
        state.heard(notification: "h:host-a:x", host: "host-a")
        #expect(state.count == 1, "heartbeats drop nothing")
        state.heard(notification: "u:alice", host: "host-a")
        #expect(state.count == 0)
    }

    @Test("update: a cached session's new last use is what the next hit sees, in either generation; an uncached one is not added")
    func update() {
        // Capacity 4: two fills fill `young` to half, so the third moves them to `old`.
        var state = Self.fresh(capacity: 4)
        let a = Self.session(1), b = Self.session(2), c = Self.session(3)
        for session in [a, b, c] {
            let ticket = Self.ticket(&state, session.id, now: 100)!
            let kept = state.fill(ticket, session: session, check: Self.check, user: nil, userKey: "u:alice", now: 100)
            #expect(kept)
        }
        var used = [a, c, Self.session(4)]
        for index in used.indices { used[index].lastSeenAt = 77 }
        for session in used { state.update(session) }
        func lastSeen(_ id: SessionID) -> Int64? {
            if case .hit(let session, _, _) = state.lookup(id, now: 100) { return session.lastSeenAt }
            return nil
        }
        // a was in the old generation, c in the young; b was not updated; the fourth was never cached.
        #expect([lastSeen(a.id), lastSeen(b.id), lastSeen(c.id), lastSeen(Self.session(4).id)] == [77, 0, 77, nil])
        #expect(state.count == 3)
        var off = Self.fresh(capacity: 0)
        off.update(used[0])
        #expect(off.count == 0)
    }

    @Test("capacity 0: never used")
    func off() {
        var state = Self.fresh(capacity: 0)
        guard case .bypass = state.lookup(Self.session(1).id, now: 100) else { Issue.record("used with capacity 0"); return }
    }

    @Test("session ids in notifications: 32 lower-case hex digits, else not an id")
    func ids() {
        let id = Self.session(0x0123_4567_89ab_cdef).id
        #expect(SessionCacheState.sessionID(hex: Substring(PostgresRows.hex(id.bytes))) == id)
        for bad in ["", "00", String(repeating: "g", count: 32), String(repeating: "A", count: 32), String(repeating: "0", count: 34)] {
            #expect(SessionCacheState.sessionID(hex: Substring(bad)) == nil, "\(bad)")
        }
    }
}
