import KeyholeApple
import KeyholeProtocol
import KeyholeStore
import Logging
import ServiceLifecycle
import Synchronization

/// Checks the refresh token of every Apple user who has one (`/auth/token`, grant_type
/// refresh_token) once a day at most, as Apple asks: Apple answers `invalid_grant` once the user has
/// withdrawn consent (Settings > Apple ID > Sign in with Apple), and keyholed then revokes their
/// sessions (or only flags them, by configuration) and drops the token. Apple unreachable revokes
/// nothing: the checks wait and go on later.
public final class AppleRefreshChecks: Service, Sendable {
    /// How often, how fast, and what a withdrawn consent does.
    public struct Configuration: Sendable, Equatable {
        /// What happens to the sessions of a user whose consent is withdrawn.
        public enum OnRevoked: String, Sendable, Equatable {
            /// Every session of theirs is revoked.
            case revokeSessions = "revoke_sessions"
            /// Their sessions stay; the record says `consent_revoked_at` for the application to act.
            case flag
        }

        /// The shortest time between two checks of one user's token; never less than a day, which is
        /// as often as Apple allows.
        public var interval: Int64 = 86_400 {
            didSet { interval = max(interval, 86_400) }
        }
        /// Checks per minute at most, across all users.
        public var perMinute = 60
        public var onRevoked = OnRevoked.revokeSessions
        /// How often the schedule is looked at for checks that fell due.
        public var scanInterval: Duration = .seconds(60)
        /// How many of the earliest due times a walk through the users keeps
        /// (`RefreshCheckSchedule`): the users are walked again once they are checked, or sooner.
        public var scheduleCapacity = 65_536
        /// The longest time between two walks through the users, in seconds, from a minute to half a
        /// day (below the shortest interval, a day, which the schedule's horizon relies on): how late
        /// a check another host claimed and then failed is found here.
        public var rewalkAfter: Int64 = 3600 {
            didSet { rewalkAfter = min(max(rewalkAfter, 60), 43_200) }
        }
        /// The pause after Apple failed or refused a check, at least (Apple's Retry-After when longer).
        public var pauseAfterFailure: Duration = .seconds(900)

        /// The defaults.
        public init() {}
    }

    /// What one check found.
    public enum Outcome: Sendable, Equatable {
        /// Apple still honours the token; the check's time is recorded.
        case valid
        /// Apple answered invalid_grant: the token is dropped and, by policy, `sessions` were revoked.
        case consentRevoked(sessions: Int)
        /// The user has no token to check (or no record).
        case noToken
        /// Apple did not answer usably, or refused keyholed's credentials: nothing changed.
        case failed(AppleError)
        /// The token does not open with the store key: nothing changed.
        case unreadable
        /// Not checked: no longer due, or another host took the check (several hosts).
        case skipped
        /// The store could not be read or written: nothing changed at Apple's end worth keeping.
        case storageFailed(StoreError)
    }

    private struct State {
        var checks = 0
        var consentRevoked = 0
        var failures = 0
        /// Users whose token does not open: logged once, skipped until restart.
        var unreadable: Set<Principal> = []
    }

    let issuer: String
    private let store: any AppleStoring
    /// Read at each use: a reload may put a new team key or endpoint in place (the store key stays).
    private let exchange: @Sendable () -> AppleOperations.Exchange
    private let configuration: Configuration
    private let now: @Sendable () -> Double
    private let logger: Logger
    private let state = Mutex(State())
    private let doorbell = Doorbell()
    private let walks = Mutex(0)

    /// Checks for the users of `issuer` in `store`, through `exchange`'s client and key.
    public convenience init(
        issuer: String, store: any AppleStoring, exchange: AppleOperations.Exchange, configuration: Configuration = Configuration(),
        now: @escaping @Sendable () -> Double, logger: Logger
    ) {
        self.init(issuer: issuer, store: store, exchanges: { exchange }, configuration: configuration, now: now, logger: logger)
    }

    /// Checks for the users of `issuer` in `store`, through the client and key `exchanges` gives at
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

    /// When `principal`'s token, last checked at `checkedAt`, is due: `interval` later, plus a spread
    /// of up to an eighth of the interval fixed per user, so that checks that fell due together (many
    /// sign-ins in one hour, keyholed stopped for a day) spread out rather than go at once.
    func due(_ principal: Principal, checkedAt: Int64) -> Int64 {
        // FNV-1a of the sub: stable across restarts, unlike Hasher.
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in principal.sub.utf8 { hash = (hash ^ UInt64(byte)) &* 0x100_0000_01b3 }
        // Saturating: a damaged or far-future refresh_checked_at must not trap.
        let spread = Int64(hash % UInt64(configuration.interval / 8))
        let (sum, overflow) = checkedAt.addingReportingOverflow(configuration.interval + spread)
        return overflow ? (checkedAt > 0 ? .max : .min) : sum
    }

    /// The users whose check is due at `time`, most overdue first (`nil`: the store could not be read):
    /// a whole walk, kept whole.
    package func dueUsers(at time: Int64) async -> [Principal]? {
        guard var schedule = await walk(RefreshCheckSchedule(capacity: .max, rewalkAfter: configuration.rewalkAfter), at: time) else {
            return nil
        }
        var due: [Principal] = []
        while let principal = schedule.next(at: time) { due.append(principal) }
        return due
    }

    /// A walk through every user of `issuer` begun at `time`, into a schedule like `schedule`
    /// (`nil`: the store could not be read). Users whose token does not open are left out.
    func walk(_ schedule: RefreshCheckSchedule, at time: Int64) async -> RefreshCheckSchedule? {
        var walk = schedule.walk(startingAt: time)
        let skipped = state.withLock { $0.unreadable }
        var cursor: UserCursor?
        repeat {
            let users: [User]
            do {
                (users, cursor) = try await store.users(of: issuer, from: cursor, limit: 4096)
            } catch {
                logger.warning("apple.refresh_checks_unreadable", metadata: ["error": "\(error.message)"])
                return nil
            }
            for user in users {
                guard let grant = AppleGrant(user), !skipped.contains(user.principal) else { continue }
                walk.add(user.principal, due: due(user.principal, checkedAt: grant.checkedAt))
            }
        } while cursor != nil
        return walk.end()
    }

    /// Checks `principal`'s token at Apple now and acts on the answer. `claiming`: only if the check
    /// is still due and no other host took it (the background walk; `apple.refresh_check` checks at
    /// once).
    func check(_ principal: Principal, claiming: Bool = false) async -> Outcome {
        let user: User?
        do {
            user = try await store.user(principal)
        } catch {
            return .storageFailed(error)
        }
        guard let user, let grant = AppleGrant(user) else { return .noToken }
        if claiming {
            switch await claim(principal, grant: grant) {
            case .success(true): break
            case .success(false): return .skipped
            case .failure(let error): return .storageFailed(error)
            }
        }
        let exchange = exchange()
        guard let token = grant.open(for: principal, with: exchange.sealingKey) else {
            let first = state.withLock { $0.unreadable.insert(principal).inserted }
            if first {
                logger.error("apple.refresh_token_unreadable", metadata: [
                    "sub": "\(principal.sub)", "error": "the stored refresh token does not open with the store key: was the key replaced?",
                ])
            }
            return .unreadable
        }
        let answer: Result<Void, AppleError>
        do {
            _ = try await exchange.client.validateRefreshToken(token, clientID: grant.clientID)
            answer = .success(())
        } catch {
            answer = .failure(error)
        }
        let time = Int64(now().rounded(.down))
        switch answer {
        case .success:
            state.withLock { $0.checks += 1 }
            do {
                // Only the grant that was checked: a sign-in meanwhile stored a newer one, checked by issue.
                _ = try await store.modifyUser(principal, now: time, revokeSessions: false) { user in
                        guard var current = AppleGrant(user), current.sealedToken == grant.sealedToken else { return false }
                        current.checkedAt = time
                        current.store(in: &user)
                        return true
                }
            } catch {
                // Unrecorded, the check would be due again at once: the service pauses instead.
                logger.warning("apple.refresh_check_not_recorded", metadata: ["sub": "\(principal.sub)", "error": "\(error.message)"])
                return .storageFailed(error)
            }
            return .valid
        case .failure(let error) where error.isInvalidGrant:
            return await consentWithdrawn(principal, grant: grant, at: time)
        case .failure(let error):
            state.withLock { $0.failures += 1 }
            let metadata: Logger.Metadata = ["sub": "\(principal.sub)", "client_id": "\(grant.clientID)", "error": "\(error.description)"]
            if error.isRejected { logger.error("apple.refresh_check_refused", metadata: metadata) } else { logger.warning("apple.refresh_check_failed", metadata: metadata) }
            return .failed(error)
        }
    }

    private func consentWithdrawn(_ principal: Principal, grant: AppleGrant, at time: Int64) async -> Outcome {
        let revoke = configuration.onRevoked == .revokeSessions
        let changed: (user: User, applied: Bool, sessions: Int)?
        do {
            changed = try await store.modifyUser(principal, now: time, revokeSessions: revoke) { user in
                // A sign-in since stored a new grant (new consent): its sessions stay.
                guard AppleGrant(user)?.sealedToken == grant.sealedToken else { return false }
                AppleGrant.remove(from: &user, revokedAt: time)
                return true
            }
        } catch {
            // Not recorded: the next check finds the same and tries again.
            logger.warning("apple.consent_revoked_not_recorded", metadata: ["sub": "\(principal.sub)", "error": "\(error.message)"])
            return .storageFailed(error)
        }
        guard let changed, changed.applied else {
            state.withLock { $0.checks += 1 }
            return .noToken
        }
        let sessions = changed.sessions
        SessionMetrics.count(sessions, in: SessionMetrics.consentRevoked)
        state.withLock { state in
            state.checks += 1
            state.consentRevoked += 1
        }
        logger.notice("apple.consent_revoked", metadata: [
            "sub": "\(principal.sub)", "client_id": "\(grant.clientID)", "on_revoked": "\(configuration.onRevoked.rawValue)",
            "sessions_revoked": "\(sessions)", "trigger": "refresh_check", "audit": "true",
        ])
        return .consentRevoked(sessions: sessions)
    }

    /// Takes the check of `principal`'s `grant` for this host, if it is still due now and no other
    /// host took it within `pauseAfterFailure` of now (either way: a host whose clock runs ahead
    /// holds its claim too): whether this host checks. Stamped with the time of the claim, not of
    /// the walk that found it due, which may have started long before.
    private func claim(_ principal: Principal, grant: AppleGrant) async -> Result<Bool, StoreError> {
        let window = claimWindow
        let time = Int64(now().rounded(.down))
        let due = { @Sendable (checkedAt: Int64) in self.due(principal, checkedAt: checkedAt) }
        do {
            let claimed = try await store.modifyUser(principal, now: time, revokeSessions: false) { user in
                guard let current = AppleGrant(user), current.sealedToken == grant.sealedToken, due(current.checkedAt) <= time else { return false }
                if let claimedAt = AppleGrant.checkClaimedAt(user) {
                    // Without a trap for a damaged stamp: a difference that overflows is no claim.
                    let apart = claimedAt.subtractingReportingOverflow(time)
                    if !apart.overflow, apart.partialValue.magnitude < UInt64(window) { return false }
                }
                AppleGrant.claimCheck(in: &user, at: time)
                return true
            }
            return .success(claimed?.applied == true)
        } catch {
            logger.warning("apple.refresh_check_not_claimed", metadata: ["sub": "\(principal.sub)", "error": "\(error.message)"])
            return .failure(error)
        }
    }

    /// Checks what falls due, paced to `perMinute`, until graceful shutdown. The users are walked
    /// only when the schedule says so (`RefreshCheckSchedule`); a pass with nothing due reads no user.
    public func run() async {
        await withGracefulShutdownHandler {
            let spacing = Duration.milliseconds(max(1, 60_000 / max(1, configuration.perMinute)))
            var schedule = RefreshCheckSchedule(capacity: configuration.scheduleCapacity, rewalkAfter: configuration.rewalkAfter)
            while !Task.isCancelled && !Task.isShuttingDownGracefully {
                var pause = configuration.scanInterval
                schedule = await pass(schedule, pause: &pause, spacing: spacing)
                await doorbell.wait(upTo: pause)
            }
        } onGracefulShutdown: {
            self.doorbell.ring()
        }
    }

    /// One pass: a walk if the schedule needs one, then every check due, in turn, walking again
    /// whenever the last walk is `rewalkAfter` old (a long backlog included). Sets `pause` when Apple
    /// failed (every other check would fail the same way). Returns the schedule after.
    package func pass(_ start: RefreshCheckSchedule, pause: inout Duration, spacing: Duration) async -> RefreshCheckSchedule {
        var schedule = start
        var time = Int64(now().rounded(.down))
        // At the start, at the horizon; within the pass only by age: in a backlog the horizon is
        // already past, and a walk after every check would be the old cost again.
        var walkDue = schedule.needsWalk(at: time)
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            if walkDue || schedule.walkIsOld(at: time) {
                // The store unreadable: the next pass walks again.
                guard let walked = await walk(schedule, at: time) else { return schedule }
                schedule = walked
                walks.withLock { $0 += 1 }
                walkDue = false
            }
            guard let principal = schedule.next(at: time) else { break }
            let outcome = await check(principal, claiming: true)
            switch outcome {
            case .skipped, .noToken, .unreadable:
                // Not due any more (checked elsewhere, signed in again), or nothing to check: its next
                // due time, if any, is past the horizon, and the next walk finds it.
                break
            case .storageFailed, .failed:
                // Still due. This host's claim may be written already (the failure came after it):
                // tried again once that claim's window is over, when the claim no longer stops it.
                schedule.putBack(principal, due: time + claimWindow)
                if case .failed(let error) = outcome {
                    pause = max(configuration.pauseAfterFailure, .milliseconds(error.retryAfterMs ?? 0))
                }
                return schedule
            case .valid, .consentRevoked:
                await doorbell.wait(upTo: spacing)
            }
            time = Int64(now().rounded(.down))
        }
        return schedule
    }

    /// How long a claim on a check holds, in seconds, either side of the clock of the host that made it.
    var claimWindow: Int64 { max(configuration.pauseAfterFailure.components.seconds, 60) }

    /// Walks through every user since start: for the benchmark and the tests.
    package var walkCount: Int { walks.withLock { $0 } }

    /// Checks completed with the grant still valid (or gone), with consent found withdrawn, and
    /// checks that failed, since start: for the metrics.
    public var figures: (ok: Int, consentRevoked: Int, failures: Int) {
        state.withLock { ($0.checks - $0.consentRevoked, $0.consentRevoked, $0.failures) }
    }

    /// The `refresh_checks` figures of `stats.apple`.
    var statistics: [String: JSONValue] {
        state.withLock { state in
            ["done": .int(Int64(state.checks)), "consent_revoked": .int(Int64(state.consentRevoked)), "failures": .int(Int64(state.failures))]
        }
    }
}
