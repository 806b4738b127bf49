import KeyholeApple
import KeyholeJOSE
import KeyholeProtocol
import KeyholeStore
import Logging
import ServiceLifecycle
import Synchronization

/// Revocations at Apple owed for deleted users (`/auth/revoke` of their refresh token, as Apple
/// requires on account deletion). Each is an entry in the store's outbox, added in the same change as
/// the deletion, and stays there, across restarts, until Apple accepts it: tried at once by
/// `user.delete`, then by this service with growing back-off while Apple cannot be reached.
public final class AppleRevocations: Service, Sendable {
    /// How retries are paced.
    public struct Configuration: Sendable {
        /// The wait after the first failure; it doubles with each failure after.
        public var firstRetry: Duration = .seconds(5)
        /// The longest wait between two tries.
        public var longestRetry: Duration = .seconds(3600)
        /// How long a host holds an entry it is sending (with several hosts on PostgreSQL): longer than
        /// one call to Apple may take; a host that dies sending loses it after this, and another
        /// host sends it.
        public var lease: Int64 = 60
        /// How often a store shared with other hosts is looked at for work none of them is doing (one
        /// added by a host that died before sending it): its lease, or its back-off, may have run out.
        public var sharedRescan: Duration = .seconds(15)

        /// The defaults.
        public init() {}
    }

    /// The outbox kind of a revocation.
    public static let kind = "apple.revoke"

    /// What keyholed knows of one pending revocation besides its outbox entry: kept in memory only,
    /// so a restart retries everything at once.
    struct Attempts {
        var count = 0
        var next: Double = 0
        var lastError: String?
    }

    private struct State {
        var attempts: [UInt64: Attempts] = [:]
        /// Entries a task is sending to Apple right now: nobody else sends them meanwhile.
        var inFlight: Set<UInt64> = []
        var revoked = 0
        var failures = 0
        /// Entries owed as of the last pass, for a store that cannot count without I/O.
        var pending = 0
    }

    /// The issuer whose users are Apple's.
    let issuer: String
    /// Where the outbox is (what `user.delete` of one of `issuer`'s users adds to).
    let store: any AppleStoring
    /// Read at each use: a reload may put a new team key or endpoint in place (the store key stays).
    private let exchange: @Sendable () -> AppleOperations.Exchange
    private let configuration: Configuration
    private let now: @Sendable () -> Double
    private let logger: Logger
    private let state = Mutex(State())
    private let doorbell = Doorbell()

    /// Revocations for the users of `issuer` in `store`, through `exchange`'s client and key.
    public convenience init(
        issuer: String, store: any AppleStoring, exchange: AppleOperations.Exchange, configuration: Configuration = Configuration(),
        now: @escaping @Sendable () -> Double, logger: Logger
    ) {
        self.init(issuer: issuer, store: store, exchanges: { exchange }, configuration: configuration, now: now, logger: logger)
    }

    /// Revocations for the users of `issuer` in `store`, through the client and key `exchanges` gives at
    /// the time of each call to Apple (the running `[apple]` configuration's).
    public init(
        issuer: String, store: any AppleStoring, exchanges: @escaping @Sendable () -> AppleOperations.Exchange,
        configuration: Configuration = Configuration(), now: @escaping @Sendable () -> Double, logger: Logger
    ) {
        self.issuer = issuer
        self.store = store
        self.exchange = exchanges
        self.configuration = configuration
        self.now = now
        self.logger = logger
    }

    /// The outbox entry a deletion of `user` must add: their sealed refresh token (it stays sealed in
    /// the log), with the client it was issued to. `nil` when they have none.
    static func work(for user: User) -> Store.OutboxWork? {
        guard let grant = AppleGrant(user) else { return nil }
        return (kind, [
            "issuer": .string(user.principal.issuer), "sub": .string(user.principal.sub),
            "client_id": .string(grant.clientID), "refresh_token": .string(Base64URL.encode(grant.sealedToken)),
        ])
    }

    /// Tries `entry` now unless a try is under way; returns whether Apple took the token back (the
    /// entry is then done). A failure schedules the next try.
    func attempt(_ entry: OutboxEntry) async -> Bool {
        let claimed = state.withLock { $0.inFlight.insert(entry.id).inserted }
        guard claimed else { return false }
        defer { _ = state.withLock { $0.inFlight.remove(entry.id) } }
        switch await claim(entry) {
        case .claimed?: break
        case .gone?:
            // Done by another try (or host) since the caller listed it: nothing to send.
            _ = state.withLock { $0.attempts.removeValue(forKey: entry.id) }
            return true
        case .busy(let until)?:
            // Another host is sending it, or put it off after a failure: looked at again then.
            state.withLock { state in state.attempts[entry.id, default: Attempts()].next = Double(until) }
            return false
        case nil:
            return false
        }
        let failure: AppleError
        var unreadable = false
        do {
            try await send(entry)
            if await finish(entry, detail: "revoked") { return true }
            failure = .unavailable("revoked at Apple, but the store could not record it", retryAfterMs: 1000)
        } catch let error as AppleError where error.isInvalidGrant {
            // Apple no longer knows the token (it expired, or the user withdrew consent): nothing is left to revoke.
            if await finish(entry, detail: "already_invalid") { return true }
            failure = .unavailable("the store could not record the revocation", retryAfterMs: 1000)
        } catch let error as AppleError {
            failure = error
        } catch {
            // Only a store key other than the one that sealed it can cause this: kept for when the
            // right key is back.
            unreadable = true
            failure = .unavailable("\(error)", retryAfterMs: 0)
        }
        let (attempts, wait) = state.withLock { state -> (Int, Duration) in
            var attempts = state.attempts[entry.id] ?? Attempts()
            attempts.count += 1
            attempts.lastError = failure.description
            var wait = configuration.firstRetry * (1 << min(attempts.count - 1, 20))
            wait = min(max(wait, .milliseconds(failure.retryAfterMs ?? 0)), configuration.longestRetry)
            attempts.next = now() + Double(wait.components.seconds) + Double(wait.components.attoseconds) / 1e18
            state.attempts[entry.id] = attempts
            state.failures += 1
            return (attempts.count, wait)
        }
        // Other hosts wait as long (a no-op for the local store, whose back-off is this one).
        let time = Int64(now().rounded(.down))
        try? await store.releaseOutbox(entry.id, retryAt: time + wait.components.seconds, now: time)
        let metadata: Logger.Metadata = [
            "id": "\(entry.idText)", "client_id": "\(entry.payload["client_id"]?.stringValue ?? "")",
            "attempts": "\(attempts)", "retry_in_s": "\(wait.components.seconds)", "error": "\(failure.description)",
        ]
        // Apple refusing keyholed's own credentials will not mend itself: the operator must act.
        if failure.isRejected || unreadable { logger.error("apple.revoke_refused", metadata: metadata) } else { logger.warning("apple.revoke_failed", metadata: metadata) }
        return false
    }

    /// Takes `entry` in the store for this host (`nil`: the store could not say; tried again soon).
    private func claim(_ entry: OutboxEntry) async -> OutboxClaim? {
        do {
            return try await store.claimOutbox(entry.id, lease: configuration.lease, now: Int64(now().rounded(.down)))
        } catch {
            state.withLock { state in state.attempts[entry.id, default: Attempts()].next = now() + 5 }
            logger.warning("apple.revoke_not_claimed", metadata: ["id": "\(entry.idText)", "error": "\(error.message)"])
            return nil
        }
    }

    private struct Unreadable: Error, CustomStringConvertible {
        var description: String
    }

    private func send(_ entry: OutboxEntry) async throws {
        guard case .string(let sub)? = entry.payload["sub"], case .string(let issuer)? = entry.payload["issuer"],
            case .string(let clientID)? = entry.payload["client_id"], case .string(let sealed)? = entry.payload["refresh_token"],
            let box = Base64URL.decode(sealed)
        else { throw Unreadable(description: "the outbox entry lacks sub, issuer, client_id or refresh_token") }
        let grant = AppleGrant(sealedToken: box, clientID: clientID, checkedAt: 0)
        let exchange = exchange()
        guard let token = grant.open(for: Principal(issuer: issuer, sub: sub), with: exchange.sealingKey) else {
            throw Unreadable(description: "the refresh token does not open with the store key")
        }
        try await exchange.client.revoke(token, kind: .refreshToken, clientID: clientID)
    }

    /// Marks `entry` done in the store; `false` if that could not be written (it is then tried again,
    /// after a back-off, as a failed send is).
    private func finish(_ entry: OutboxEntry, detail: String) async -> Bool {
        let removed: Bool
        do {
            removed = try await store.completeOutbox(entry.id)
        } catch {
            logger.warning("apple.revoke_not_recorded", metadata: ["id": "\(entry.idText)", "error": "\(error.message)"])
            return false
        }
        state.withLock { state in
            state.attempts[entry.id] = nil
            if removed { state.revoked += 1 }
        }
        guard removed else { return true }
        logger.info("apple.revoked", metadata: [
            "id": "\(entry.idText)", "client_id": "\(entry.payload["client_id"]?.stringValue ?? "")", "result": "\(detail)",
        ])
        return true
    }

    /// Wakes the service: an entry it should try may be due.
    func wake() { doorbell.ring() }

    /// Tries every due entry, one at a time, until graceful shutdown.
    public func run() async {
        await withGracefulShutdownHandler {
            while !Task.isCancelled && !Task.isShuttingDownGracefully {
                let next = await retryDue()
                var wait = next.map { max(0, $0 - now()) } ?? 3600
                // Only the local store's own changes add to its outbox; a shared one, any host's.
                if store.outboxCountNow(kind: Self.kind) == nil {
                    let rescan = configuration.sharedRescan.components
                    wait = min(wait, Double(rescan.seconds) + Double(rescan.attoseconds) / 1e18)
                }
                await doorbell.wait(upTo: .milliseconds(Int64(wait * 1000) + 1))
            }
        } onGracefulShutdown: {
            self.doorbell.ring()
        }
    }

    /// One pass: tries the entries that are due; returns when the next one will be, if any is left.
    func retryDue() async -> Double? {
        guard let entries = await owed() else { return now() + 5 }
        for entry in entries {
            guard !Task.isShuttingDownGracefully, !Task.isCancelled else { return nil }
            // An entry in flight (user.delete's own try) is left to its task, which wakes this one if it fails.
            let due = state.withLock { !$0.inFlight.contains(entry.id) && ($0.attempts[entry.id]?.next ?? 0) <= now() }
            if due { _ = await attempt(entry) }
        }
        guard let owed = await owed() else { return now() + 5 }
        let left = Set(owed.map(\.id))
        return state.withLock { state in
            state.pending = left.count
            // Forget entries done elsewhere (another attempt, a restart's replay).
            state.attempts = state.attempts.filter { left.contains($0.key) }
            return left.subtracting(state.inFlight).map { state.attempts[$0]?.next ?? 0 }.min()
        }
    }
}

extension AppleRevocations {
    /// Every revocation owed, oldest first; `nil` when the store could not be read (logged).
    private func owed() async -> [OutboxEntry]? {
        do {
            return try await store.outbox(kind: Self.kind)
        } catch {
            logger.warning("apple.revocations_unreadable", metadata: ["error": "\(error.message)"])
            return nil
        }
    }

    /// `apple.pending`'s list: every revocation still owed, oldest first.
    func pending() async throws(ProtocolError) -> [JSONValue] {
        let entries = try await StoreCommit.stored { () async throws(StoreError) in try await store.outbox(kind: Self.kind) }
        let attempts = state.withLock { $0.attempts }
        return entries.map { entry in
            var item: [String: JSONValue] = [
                "id": .string(entry.idText), "kind": "revoke_refresh_token",
                "issuer": entry.payload["issuer"] ?? .null, "sub": entry.payload["sub"] ?? .null,
                "client_id": entry.payload["client_id"] ?? .null, "queued_at": .int(entry.createdAt),
                "attempts": .int(Int64(attempts[entry.id]?.count ?? 0)),
            ]
            if let tried = attempts[entry.id] {
                item["next_attempt_at"] = .int(Int64(tried.next.rounded(.up)))
                if let error = tried.lastError { item["last_error"] = .string(error) }
            }
            return .object(item)
        }
    }

    /// The `revocations` figures of `stats.apple`.
    /// Revocations owed now, sent since start, and attempts that failed since start: for the metrics.
    public var figures: (pending: Int, done: Int, failures: Int) {
        let known = store.outboxCountNow(kind: Self.kind)
        return state.withLock { (known ?? $0.pending, $0.revoked, $0.failures) }
    }

    var statistics: [String: JSONValue] {
        let known = store.outboxCountNow(kind: Self.kind)
        return state.withLock { state in
            let pending = known ?? state.pending
            return ["pending": .int(Int64(pending)), "done": .int(Int64(state.revoked)), "failures": .int(Int64(state.failures))]
        }
    }
}
