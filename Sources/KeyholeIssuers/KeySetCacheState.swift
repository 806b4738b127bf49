import KeyholeJOSE

/// The life of one issuer's key set, without I/O: when to fetch, which keys to serve, and whether a
/// token with an unknown `kid` may cause a fetch.
///
/// The owner performs the actions (start an HTTP fetch, arm a timer) and reports back. Time and the
/// retry jitter are passed in, so every rule is tested without clocks or servers.
public struct KeySetCacheState: Sendable {
    /// The cache's rules (issue 3, "The hot key-set cache").
    public struct Configuration: Sendable, Equatable {
        /// Bounds of a key set's time to live, in seconds, whatever `Cache-Control` says.
        public var minimumTTL: Double = 5 * 60
        public var maximumTTL: Double = 24 * 3600
        /// The time to live when the response gives no `max-age`.
        public var defaultTTL: Double = 3600
        /// How far into its time to live a key set is refreshed in the background, so that in steady
        /// state no request waits for a fetch.
        public var refreshFraction: Double = 0.75
        /// At most one fetch caused by an unknown `kid` per this many seconds.
        public var unknownKeyCooldown: Double = 30
        /// How long after its fetch the last good key set keeps serving while fetches fail.
        public var maximumStaleness: Double = 7 * 24 * 3600
        /// Retry delays after failed fetches: `retryBase` doubling up to `retryMaximum`, with jitter.
        public var retryBase: Double = 1
        public var retryMaximum: Double = 5 * 60

        /// The defaults.
        public init() {}
    }

    /// Why a fetch starts.
    public enum FetchReason: String, Sendable, Equatable {
        case initial, refresh, retry, unknownKey = "unknown_key", forced
    }

    /// What the owner does next.
    public enum Action: Sendable, Equatable {
        /// Nothing (a fetch is already running, or nothing is due).
        case none
        /// Start a fetch now and report with `fetchSucceeded` or `fetchFailed`.
        case fetch(FetchReason)
        /// Call `timerFired` at this time.
        case wakeUp(at: Double)
    }

    /// What a request whose token names an unknown `kid` does.
    public enum UnknownKeyDecision: Sendable, Equatable {
        /// A fetch is running: wait for it, then look for the key again.
        case waitForFetch
        /// Start a fetch (reason `unknownKey`) and wait for it.
        case fetchAndWait
        /// Too soon after the last such fetch: fail now with `token_key_unknown`.
        case failFast
    }

    public let configuration: Configuration
    /// The last good key set.
    public private(set) var keys: JWKSet?
    /// When it was fetched, and when it expires.
    public private(set) var fetchedAt: Double?
    public private(set) var expiresAt: Double?
    /// The last failure, until a fetch succeeds.
    public private(set) var lastError: String?
    /// The fetch running now, if any.
    public private(set) var fetching: FetchReason?
    /// Counters for `jwks.status`.
    public private(set) var fetchCount = 0
    public private(set) var failureCount = 0
    private var consecutiveFailures = 0
    private var lastUnknownKeyFetch: Double?
    /// When the owner's timer is due (a refresh or a retry), if one is armed.
    public private(set) var nextWakeUp: Double?

    /// A cache, possibly holding a key set persisted by an earlier run (used until it is too stale).
    public init(configuration: Configuration = Configuration(), persisted: (keys: JWKSet, fetchedAt: Double, expiresAt: Double)? = nil) {
        self.configuration = configuration
        if let persisted {
            keys = persisted.keys
            fetchedAt = persisted.fetchedAt
            expiresAt = persisted.expiresAt
        }
    }

    /// The keys to verify with now: the last good set, unless it is older than `maximumStaleness`.
    public func usableKeys(now: Double) -> JWKSet? {
        guard let keys, let fetchedAt, let expiresAt else { return nil }
        return now < max(expiresAt, fetchedAt + configuration.maximumStaleness) ? keys : nil
    }

    /// Start-up: fetch at once unless a persisted set is still fresh, else wake up to refresh it.
    public mutating func start(now: Double) -> Action {
        guard let fetchedAt, let expiresAt, now < expiresAt else { return beginFetch(keys == nil ? .initial : .refresh) }
        return wakeUp(at: refreshTime(fetchedAt: fetchedAt, expiresAt: expiresAt))
    }

    /// A fetch returned a key set; `maxAge` is its `Cache-Control` max-age, if any.
    public mutating func fetchSucceeded(_ keys: JWKSet, maxAge: Int64?, now: Double) -> Action {
        let ttl = min(configuration.maximumTTL, max(configuration.minimumTTL, maxAge.map(Double.init) ?? configuration.defaultTTL))
        self.keys = keys
        fetchedAt = now
        expiresAt = now + ttl
        lastError = nil
        fetching = nil
        consecutiveFailures = 0
        return wakeUp(at: refreshTime(fetchedAt: now, expiresAt: now + ttl))
    }

    /// A fetch failed. `jitter` is a random number in [0, 1): retries of many keyholeds spread out.
    public mutating func fetchFailed(_ error: String, now: Double, jitter: Double) -> Action {
        fetching = nil
        lastError = error
        failureCount += 1
        consecutiveFailures += 1
        let exponential = configuration.retryBase * Double(1 << min(consecutiveFailures - 1, 30))
        let delay = min(configuration.retryMaximum, exponential) * (0.5 + 0.5 * min(max(jitter, 0), 1))
        return wakeUp(at: now + delay)
    }

    /// The timer asked for by `.wakeUp` fired.
    public mutating func timerFired(now: Double) -> Action {
        guard fetching == nil, let due = nextWakeUp else { return .none }
        guard now >= due else { return .wakeUp(at: due) }
        nextWakeUp = nil
        if consecutiveFailures > 0 { return beginFetch(.retry) }
        return beginFetch(keys == nil ? .initial : .refresh)
    }

    /// A token names a `kid` the current set lacks (or there is no set yet).
    public mutating func unknownKey(now: Double) -> UnknownKeyDecision {
        rateLimitedFetch(.unknownKey, now: now)
    }

    /// An operator asked for a fetch (`jwks.refresh`): under the same limit as unknown keys.
    public mutating func forceRefresh(now: Double) -> UnknownKeyDecision {
        rateLimitedFetch(.forced, now: now)
    }

    /// How long until a rate-limited fetch (unknown key, `jwks.refresh`) may start again; 0 when it may now.
    public func cooldownRemaining(now: Double) -> Double {
        // A wall clock stepped back to before the last fetch must not stretch the cool-down.
        guard let last = lastUnknownKeyFetch, now >= last else { return 0 }
        return max(0, last + configuration.unknownKeyCooldown - now)
    }

    /// Whether `unknownKey` or `forceRefresh` would now wait for a fetch rather than fail fast.
    public func allowsRateLimitedFetch(now: Double) -> Bool {
        fetching != nil || cooldownRemaining(now: now) == 0
    }

    /// Joins a running fetch, or starts one unless the last rate-limited fetch was within the cool-down.
    private mutating func rateLimitedFetch(_ reason: FetchReason, now: Double) -> UnknownKeyDecision {
        // Nothing fetched nor begun yet: a request ahead of `start` (keyholed answers as soon as it
        // listens) begins the start-up fetch early. That fetch is no unknown kid's, and must not start
        // the cool-down, or every new kid within it would fail fast (seen under load in CI).
        if keys == nil, fetchCount == 0 {
            _ = beginFetch(.initial)
            return .fetchAndWait
        }
        guard allowsRateLimitedFetch(now: now) else { return .failFast }
        if fetching != nil { return .waitForFetch }
        lastUnknownKeyFetch = now
        _ = beginFetch(reason)
        return .fetchAndWait
    }

    private mutating func beginFetch(_ reason: FetchReason) -> Action {
        guard fetching == nil else { return .none }
        fetching = reason
        fetchCount += 1
        return .fetch(reason)
    }

    private mutating func wakeUp(at time: Double) -> Action {
        nextWakeUp = time
        return .wakeUp(at: time)
    }

    private func refreshTime(fetchedAt: Double, expiresAt: Double) -> Double {
        fetchedAt + (expiresAt - fetchedAt) * configuration.refreshFraction
    }
}
