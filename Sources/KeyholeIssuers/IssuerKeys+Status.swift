import KeyholeJOSE

extension IssuerKeys {
    /// What `jwks.status` shows of an issuer's keys. Never key material: key IDs and times only.
    public struct Status: Sendable {
        /// The issuer's configured name.
        public let issuer: String
        /// Where its keys come from: a URL, `discovery of <issuer>`, or a file path.
        public let source: String
        /// Whether the keys are fetched (and refreshed and persisted) or read from a file.
        public let isRemote: Bool
        /// The `kid` of each key in use (keys without one are left out).
        public let kids: [String]
        /// How many keys are in use.
        public let keyCount: Int
        /// Whether requests can verify now (a key set that is not older than the staleness limit).
        public let usable: Bool
        /// When the keys in use were fetched and when they expire, in seconds since 1970.
        public let fetchedAt: Double?
        public let expiresAt: Double?
        /// When the next refresh or retry is due.
        public let nextFetchAt: Double?
        /// Why the last fetch failed, until one succeeds.
        public let lastError: String?
        /// Fetches started, and how many of them failed.
        public let fetches: Int
        public let failures: Int
        /// Why the fetch running now started, if one is.
        public let fetching: String?
        /// Requests waiting for that fetch (tokens with an unknown `kid`, `jwks.refresh`).
        public let waiting: Int
    }

    /// The status now.
    public func status() -> Status {
        let now = clock.now()
        return state.withLock { Self.status(of: $0, configuration: configuration, now: now) }
    }

    /// Returns once `predicate` holds for the status; it is checked now and after every change.
    public func waitUntil(_ predicate: @escaping @Sendable (Status) -> Bool) async {
        let now = clock.now()
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let holds = state.withLock { state -> Bool in
                if predicate(Self.status(of: state, configuration: configuration, now: now)) { return true }
                state.observers.append((predicate, continuation))
                return false
            }
            if holds { continuation.resume() }
        }
    }

    /// Resumes the observers whose predicate now holds; called after every change of state.
    func notifyObservers() {
        let now = clock.now()
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            guard !state.observers.isEmpty else { return [] }
            let status = Self.status(of: state, configuration: configuration, now: now)
            var ready: [CheckedContinuation<Void, Never>] = []
            state.observers.removeAll { observer in
                guard observer.predicate(status) else { return false }
                ready.append(observer.continuation)
                return true
            }
            return ready
        }
        for continuation in ready { continuation.resume() }
    }

    static func status(of state: State, configuration: IssuerConfiguration, now: Double) -> Status {
        let cache = state.cache
        let keys = cache.keys?.keys ?? []
        let isRemote = configuration.keySet.isRemote
        return Status(
            issuer: configuration.name, source: configuration.keySet.description, isRemote: isRemote,
            kids: keys.compactMap(\.kid), keyCount: keys.count, usable: cache.usableKeys(now: now) != nil,
            fetchedAt: cache.fetchedAt, expiresAt: cache.expiresAt?.isFinite == true ? cache.expiresAt : nil,
            nextFetchAt: isRemote && !state.stopped ? cache.nextWakeUp : nil, lastError: cache.lastError,
            fetches: cache.fetchCount, failures: cache.failureCount, fetching: cache.fetching?.rawValue, waiting: state.waiters.count)
    }
}
