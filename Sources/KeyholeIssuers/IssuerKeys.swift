import CoreMetrics
import KeyholeJOSE
import Synchronization

/// One issuer's keys while keyholed runs: the verifier requests use, and the key-set cache behind it.
///
/// Requests read the current verifier under a lock held for a few loads, never waiting for I/O. A
/// remote issuer's keys are fetched by `run(fetcher:store:logger:)` (driven by `KeySetRefresher`),
/// which performs what `KeySetCacheState` decides: the first fetch, background refreshes before
/// expiry, retries with backoff, and the fetches a request's unknown `kid` or `jwks.refresh` asks for.
/// An issuer whose key set is a local file has fixed keys and never fetches.
public final class IssuerKeys: Sendable {
    /// How a wait for a fetch ended.
    public enum FetchOutcome: Sendable, Equatable {
        /// The fetch brought a key set, now in use.
        case succeeded
        /// The fetch failed (the last good keys, if any, stay in use).
        case failed(String)
        /// No fetch: the last rate-limited one was less than the cool-down ago; seconds until allowed.
        case rateLimited(retryAfter: Double)
        /// No fetch: the keys come from a file, or the refresher has stopped.
        case notFetched
    }

    /// The issuer.
    public let configuration: IssuerConfiguration
    /// Unique to this instance in the process: a reload that replaces an issuer's keys object makes
    /// the verified-token cache's entries from the old one useless at once.
    public let serial: UInt64
    let clock: any KeySetClock
    let state: Mutex<State>
    /// This issuer's count of tokens verified (`VerificationMetrics.countVerified`), found by name
    /// on first use: found by name on every verification, it cost two strings hashed under a lock.
    let verifiedCounter = Mutex<Counter?>(nil)

    struct State {
        var cache: KeySetCacheState
        /// Made when a key set comes in, so that requests never build one.
        var verifier: JWTVerifier?
        /// A fetch a request decided on, for the refresh loop to perform.
        var requested: KeySetCacheState.FetchReason?
        /// Requests waiting for the running or requested fetch.
        var waiters: [CheckedContinuation<FetchOutcome, Never>] = []
        /// The refresh loop, while it waits for its timer or a request.
        var wake: CheckedContinuation<Void, Never>?
        var poked = false
        var stopped = false
        /// Replaced by a reload: the refresh loop ends.
        var retired = false
        /// The `jwks_uri` discovery found, until a fetch from it fails.
        var discoveredURL: String?
        var observers: [(predicate: @Sendable (Status) -> Bool, continuation: CheckedContinuation<Void, Never>)] = []
        var keysChanged: [@Sendable (JWKSet) -> Void] = []
    }

    /// A remote issuer (`jwks_uri` URL or discovery), starting from the key set a previous run persisted.
    public init(
        configuration: IssuerConfiguration, cache: KeySetCacheState.Configuration = .init(),
        persisted: KeySetStore.Entry? = nil, clock: any KeySetClock = SystemKeySetClock()
    ) {
        self.configuration = configuration
        self.serial = Self.nextSerial()
        self.clock = clock
        let state = KeySetCacheState(
            configuration: cache, persisted: persisted.map { ($0.keys, $0.fetchedAt, $0.expiresAt) })
        let verifier = persisted.map {
            JWTVerifier(keys: $0.keys, algorithms: configuration.algorithms, policy: configuration.policy)
        }
        self.state = Mutex(State(cache: state, verifier: verifier))
    }

    /// An issuer with fixed keys (a key-set file read at start-up): they never expire or refresh.
    public init(configuration: IssuerConfiguration, keys: JWKSet, clock: any KeySetClock = SystemKeySetClock()) {
        self.configuration = configuration
        self.serial = Self.nextSerial()
        self.clock = clock
        let now = clock.now()
        let state = KeySetCacheState(persisted: (keys, now, .infinity))
        let verifier = JWTVerifier(keys: keys, algorithms: configuration.algorithms, policy: configuration.policy)
        self.state = Mutex(State(cache: state, verifier: verifier))
    }

    /// A remote issuer whose settings a reload changed (audiences, algorithms, leeway) but not where
    /// its keys come from: it starts from `previous`'s last good key set, as from a persisted one, so
    /// requests never wait for a fetch because of a reload.
    public convenience init(configuration: IssuerConfiguration, cache: KeySetCacheState.Configuration = .init(), continuing previous: IssuerKeys) {
        let carried = previous.state.withLock { state -> (JWKSet, Double, Double)? in
            guard let keys = state.cache.keys, let fetchedAt = state.cache.fetchedAt, let expiresAt = state.cache.expiresAt else { return nil }
            return (keys, fetchedAt, expiresAt)
        }
        self.init(configuration: configuration, cache: cache, persistedKeys: carried, clock: previous.clock)
    }

    private init(
        configuration: IssuerConfiguration, cache: KeySetCacheState.Configuration, persistedKeys: (JWKSet, Double, Double)?,
        clock: any KeySetClock
    ) {
        self.configuration = configuration
        self.serial = Self.nextSerial()
        self.clock = clock
        let verifier = persistedKeys.map { JWTVerifier(keys: $0.0, algorithms: configuration.algorithms, policy: configuration.policy) }
        self.state = Mutex(State(cache: KeySetCacheState(configuration: cache, persisted: persistedKeys), verifier: verifier))
    }

    private static let serials = Atomic<UInt64>(0)

    private static func nextSerial() -> UInt64 {
        serials.wrappingAdd(1, ordering: .relaxed).newValue
    }

    /// Ends the refresh loop and answers every request waiting for a fetch (`.notFetched`): a reload
    /// replaced this issuer. Requests that already hold it finish with the keys it has.
    public func retire() {
        let wake = state.withLock { state -> CheckedContinuation<Void, Never>? in
            state.retired = true
            return Self.poke(&state)
        }
        wake?.resume()
    }

    /// The verifier over the keys usable now, or `nil` when there are none (not fetched yet, or the
    /// last good set is older than the staleness limit).
    public func verifier() -> JWTVerifier? {
        let now = clock.now()
        return state.withLock { state in
            state.cache.usableKeys(now: now) != nil ? state.verifier : nil
        }
    }

    /// What `checkCached` found.
    enum CachedCheck {
        /// No usable keys now, or the token's key has left the set: the token must verify again.
        case stale
        case passed
        case refused(JOSEError)
    }

    /// A cached token's checks against the verifier over the keys usable now: its key still in the
    /// set, then the request's and the clock's (`now`, seconds since 1970). In place, under the keys'
    /// lock, not on a copy of the verifier and not through a closure of the caller's: either counted
    /// references (the verifier's parts; the closure's entry, audience and nonce) on every cache hit.
    func checkCached(_ hit: VerifiedTokenCache.Entry, now: Double, audience: String?, nonce: String?) -> CachedCheck {
        let instant = clock.now()
        return state.withLock { state -> CachedCheck in
            guard state.cache.usableKeys(now: instant) != nil, let verifier = state.verifier else { return .stale }
            guard verifier.signatures.keys.contains(hit.key) else { return .stale }
            do throws(JOSEError) {
                try ClaimsValidator.check(hit.token, policy: verifier.policy, now: now, audience: audience, nonce: nonce)
                return .passed
            } catch {
                return .refused(error)
            }
        }
    }

    /// A token names a `kid` the keys lack, or there are no keys: joins the running fetch or starts
    /// one (at most one per cool-down), and returns when it ends. Look for the key again after
    /// `.succeeded`; any other outcome means the token cannot be verified now.
    public func fetchForUnknownKey() async -> FetchOutcome {
        await rateLimitedFetch { cache, now in cache.unknownKey(now: now) }
    }

    /// Whether `fetchForUnknownKey()` would wait for a fetch (one is running, or the cool-down allows
    /// one) rather than answer `.rateLimited` or `.notFetched` at once: a request that cannot be
    /// helped is answered on the spot, so a flood of unknown kids costs no task per request.
    public func fetchMayHelp() -> Bool {
        guard configuration.keySet.isRemote else { return false }
        let now = clock.now()
        return state.withLock { !$0.stopped && $0.cache.allowsRateLimitedFetch(now: now) }
    }

    /// `jwks.refresh`: a fetch now, under the same cool-down as unknown keys; returns when it ends.
    public func refresh() async -> FetchOutcome {
        await rateLimitedFetch { cache, now in cache.forceRefresh(now: now) }
    }

    private func rateLimitedFetch(
        _ decide: @escaping @Sendable (inout KeySetCacheState, Double) -> KeySetCacheState.UnknownKeyDecision
    ) async -> FetchOutcome {
        guard configuration.keySet.isRemote else { return .notFetched }
        let now = clock.now()
        return await withCheckedContinuation { continuation in
            let (immediate, wake) = state.withLock { state -> (FetchOutcome?, CheckedContinuation<Void, Never>?) in
                if state.stopped { return (.notFetched, nil) }
                switch decide(&state.cache, now) {
                case .failFast:
                    return (.rateLimited(retryAfter: state.cache.cooldownRemaining(now: now)), nil)
                case .waitForFetch:
                    state.waiters.append(continuation)
                    return (nil, nil)
                case .fetchAndWait:
                    state.requested = state.cache.fetching
                    state.waiters.append(continuation)
                    return (nil, Self.poke(&state))
                }
            }
            wake?.resume()
            if let immediate { continuation.resume(returning: immediate) }
        }
    }

    /// Registers `body` to run with each new key set, after requests start using it.
    public func onKeysChanged(_ body: @escaping @Sendable (JWKSet) -> Void) {
        state.withLock { $0.keysChanged.append(body) }
    }

    /// Wakes the refresh loop, or makes its next wait return at once.
    static func poke(_ state: inout State) -> CheckedContinuation<Void, Never>? {
        guard let wake = state.wake else {
            state.poked = true
            return nil
        }
        state.wake = nil
        return wake
    }
}
