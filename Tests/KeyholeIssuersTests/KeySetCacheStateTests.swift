import KeyholeIssuers
import KeyholeJOSE
import Testing

@Suite("KeySetCacheState")
struct KeySetCacheStateTests {
    let keys = JWKSet(keys: [])
    let t0 = 1_000_000.0

    @Test("time to live: Cache-Control max-age clamped to [5 min, 24 h], 1 h when absent; refresh at 3/4 of it", arguments: [
        (nil, 3600.0), (60, 300.0), (7200, 7200.0), (1_000_000, 86_400.0), (0, 300.0),
    ] as [(Int64?, Double)])
    func timeToLive(maxAge: Int64?, ttl: Double) {
        var state = KeySetCacheState()
        #expect(state.start(now: t0) == .fetch(.initial))
        #expect(state.fetchSucceeded(keys, maxAge: maxAge, now: t0) == .wakeUp(at: t0 + ttl * 0.75))
        #expect(state.expiresAt == t0 + ttl)
        // The background refresh starts when due, before expiry: no request waits for it.
        #expect(state.timerFired(now: t0 + ttl * 0.75) == .fetch(.refresh))
        #expect(state.usableKeys(now: t0 + ttl * 0.75) != nil)
    }

    @Test("a timer that fires early re-arms; one that fires during a fetch does nothing")
    func timers() {
        var state = KeySetCacheState()
        _ = state.start(now: t0)
        _ = state.fetchSucceeded(keys, maxAge: 3600, now: t0)
        #expect(state.timerFired(now: t0 + 100) == .wakeUp(at: t0 + 2700))
        #expect(state.unknownKey(now: t0 + 200) == .fetchAndWait)
        #expect(state.timerFired(now: t0 + 2700) == .none)
    }

    @Test("unknown kid: one fetch shared by every waiter, then none for 30 s: those fail fast")
    func unknownKeySingleFlight() {
        var state = KeySetCacheState()
        _ = state.start(now: t0)
        _ = state.fetchSucceeded(keys, maxAge: nil, now: t0)
        #expect(state.unknownKey(now: t0 + 10) == .fetchAndWait)
        #expect(state.fetching == .unknownKey)
        for _ in 0..<100 { #expect(state.unknownKey(now: t0 + 11) == .waitForFetch) }
        _ = state.fetchSucceeded(keys, maxAge: nil, now: t0 + 12)
        #expect(state.unknownKey(now: t0 + 39) == .failFast)
        #expect(state.forceRefresh(now: t0 + 39) == .failFast)
        #expect(state.unknownKey(now: t0 + 40) == .fetchAndWait)
        #expect(state.fetchCount == 3)
    }

    @Test("a request ahead of start-up begins the start-up fetch, which does not start the cool-down")
    func requestBeforeStart() {
        var state = KeySetCacheState()
        #expect(state.unknownKey(now: t0) == .fetchAndWait)
        #expect(state.fetching == .initial)
        #expect(state.start(now: t0 + 1) == .none, "already under way")
        _ = state.fetchSucceeded(keys, maxAge: nil, now: t0 + 2)
        // A new kid at once: fetched, as after any start-up fetch, not refused as too soon.
        #expect(state.unknownKey(now: t0 + 3) == .fetchAndWait)
        #expect(state.fetching == .unknownKey)
        _ = state.fetchSucceeded(keys, maxAge: nil, now: t0 + 4)
        #expect(state.unknownKey(now: t0 + 5) == .failFast)
        #expect(state.fetchCount == 2)
    }

    @Test("with no keys after a failed start-up fetch, unknown kids are held to the cool-down")
    func noKeysAfterFailure() {
        var state = KeySetCacheState()
        #expect(state.start(now: t0) == .fetch(.initial))
        _ = state.fetchFailed("down", now: t0 + 1, jitter: 0)
        #expect(state.unknownKey(now: t0 + 2) == .fetchAndWait)
        _ = state.fetchFailed("down", now: t0 + 3, jitter: 0)
        #expect(state.unknownKey(now: t0 + 4) == .failFast)
    }

    @Test("a wall clock stepped back does not stretch the cool-down")
    func clockSteppedBack() {
        var state = KeySetCacheState()
        _ = state.start(now: t0)
        _ = state.fetchSucceeded(keys, maxAge: nil, now: t0)
        #expect(state.unknownKey(now: t0 + 10) == .fetchAndWait)
        _ = state.fetchSucceeded(keys, maxAge: nil, now: t0 + 11)
        #expect(state.unknownKey(now: t0 + 20) == .failFast)
        #expect(state.cooldownRemaining(now: t0 + 20) == 20)
        // NTP steps the clock back an hour: without the guard, fetches would fail fast for an hour.
        #expect(state.cooldownRemaining(now: t0 - 3600) == 0)
        #expect(state.unknownKey(now: t0 - 3600) == .fetchAndWait)
    }

    @Test("failed fetches retry with exponential backoff and jitter, capped at 5 min; success resets it")
    func backoff() {
        var state = KeySetCacheState()
        _ = state.start(now: t0)
        var now = t0
        var delays: [Double] = []
        for attempt in 0..<12 {
            guard case .wakeUp(let at) = state.fetchFailed("connect timeout", now: now, jitter: attempt % 2 == 0 ? 0 : 0.999) else {
                Issue.record("no retry scheduled")
                return
            }
            delays.append(at - now)
            now = at
            #expect(state.timerFired(now: now) == .fetch(.retry))
        }
        // Jitter keeps each delay within [1/2, 1] of base * 2^(n-1), capped at 300 s.
        for (index, delay) in delays.enumerated() {
            let full = min(300, Double(1 << index))
            #expect(delay >= full * 0.5 && delay <= full, "retry \(index + 1): \(delay)")
        }
        #expect(state.lastError == "connect timeout")
        _ = state.fetchSucceeded(keys, maxAge: nil, now: now)
        #expect(state.lastError == nil)
        guard case .wakeUp = state.fetchFailed("503", now: now + 1, jitter: 0) else { return }
        #expect(state.failureCount == 13)
    }

    @Test("through an outage the last good keys serve for 7 days from their fetch, then no longer")
    func staleKeys() {
        var state = KeySetCacheState()
        _ = state.start(now: t0)
        _ = state.fetchSucceeded(keys, maxAge: 3600, now: t0)
        _ = state.fetchFailed("unreachable", now: t0 + 4000, jitter: 0.5)
        #expect(state.usableKeys(now: t0 + 4000) != nil)
        #expect(state.usableKeys(now: t0 + 7 * 86_400 - 1) != nil)
        #expect(state.usableKeys(now: t0 + 7 * 86_400) == nil)
    }

    @Test("a persisted key set is used at start-up: refreshed later when fresh, at once when expired")
    func persisted() {
        var fresh = KeySetCacheState(persisted: (keys, fetchedAt: t0, expiresAt: t0 + 3600))
        #expect(fresh.usableKeys(now: t0 + 60) != nil)
        #expect(fresh.start(now: t0 + 60) == .wakeUp(at: t0 + 2700))

        var expired = KeySetCacheState(persisted: (keys, fetchedAt: t0, expiresAt: t0 + 3600))
        #expect(expired.start(now: t0 + 86_400) == .fetch(.refresh))
        // The issuer may be down: the persisted keys keep verifying meanwhile.
        #expect(expired.usableKeys(now: t0 + 86_400) != nil)
        #expect(KeySetCacheState().usableKeys(now: t0) == nil)
    }
}

@Suite("CacheControl")
struct CacheControlTests {
    @Test("max-age is read; no-store, no-cache and malformed values mean the default", arguments: [
        ("max-age=3600", 3600), ("public, max-age=19512, must-revalidate", 19512), ("MAX-AGE = 60", 60),
        ("max-age=\"120\"", 120), (nil, nil), ("", nil), ("public", nil), ("max-age=", nil), ("max-age=-5", nil),
        ("max-age=1e3", nil), ("no-cache, max-age=60", nil), ("max-age=60, no-store", nil),
        ("max-age=99999999999999999999", nil),
    ] as [(String?, Int64?)])
    func maxAge(header: String?, expected: Int64?) {
        #expect(CacheControl.maxAge(header) == expected)
    }
}
