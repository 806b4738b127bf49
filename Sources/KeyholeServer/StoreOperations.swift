import KeyholeProtocol
import KeyholeStore
import NIOCore

/// The session and user operations over a `Store` (PROTOCOL.md section 7: `session.*`, `user.*`).
///
/// Reads answer inline on the event loop; changes answer when their record is as durable as the store
/// is configured to make it, through a promise the committer fulfils.
public enum StoreOperations {
    /// Limits and defaults of the operations.
    public struct Configuration: Sendable {
        /// A session's lifetime when `ttl_s` is not given (30 days).
        public var defaultTTL: Int64 = 30 * 86_400
        /// The longest `ttl_s` accepted (400 days).
        public var maxTTL: Int64 = 400 * 86_400
        /// How long a session may go unused when `idle_s` is not given (7 days).
        public var defaultIdle: Int64 = 7 * 86_400
        /// The largest `data`, as compact JSON.
        public var maxDataBytes = 4096
        /// The configured issuers' names; `local` (the application's own sign-ins) is always allowed.
        public var issuers: [String] = []

        /// The defaults.
        public init() {}
    }

    /// The issuer for an application's own sign-ins (passwords, magic links), always accepted.
    public static let localIssuer = "local"

    /// The operations, with `now` the wall clock in seconds (injected for tests). With `revocations`,
    /// deleting one of Apple's users also takes their refresh token back at Apple.
    public static func make(
        store: Store, configuration: Configuration, revocations: AppleRevocations? = nil, now: @escaping @Sendable () -> Int64
    ) -> [String: Operation] {
        make(store: store, configuration: Reloadable(configuration), revocations: revocations, now: now)
    }

    /// The operations, reading `configuration` as a reload leaves it, once per request.
    public static func make(
        store: Store, configuration: Reloadable<Configuration>, revocations: AppleRevocations? = nil,
        now: @escaping @Sendable () -> Int64
    ) -> [String: Operation] {
        let context = Context(store: store, settings: configuration, revocations: revocations, now: now)
        return sessionOperations(context).merging(userOperations(context)) { $1 }.merging(adminOperations(context)) { $1 }
    }

    struct Context: Sendable {
        let store: Store
        let settings: Reloadable<Configuration>
        var configuration: Configuration { settings.current }
        let revocations: AppleRevocations?
        let now: @Sendable () -> Int64

        /// The principal named by `sub` and `issuer`. Without `issuer`: the only configured issuer, or
        /// `local` when none is configured; with several, naming one is required, so that adding an
        /// issuer never silently changes whose sessions a request means.
        func principal(_ arguments: inout Arguments) throws(ProtocolError) -> Principal {
            try StoreOperations.principal(&arguments, issuers: configuration.issuers)
        }
    }

    /// The principal named by `sub` and `issuer` among `issuers` (see `Context.principal`).
    static func principal(_ arguments: inout Arguments, issuers: [String]) throws(ProtocolError) -> Principal {
        let sub = try arguments.string("sub", required: true, maxBytes: Principal.maximumFieldBytes)!
        guard let issuer = try arguments.string("issuer", maxBytes: Principal.maximumFieldBytes) else {
            switch issuers.count {
            case 0: return Principal(issuer: StoreOperations.localIssuer, sub: sub)
            case 1: return Principal(issuer: issuers[0], sub: sub)
            default:
                throw .badRequest("'issuer' is required: one of \((issuers + [StoreOperations.localIssuer]).joined(separator: ", "))")
            }
        }
        // By bytes: a request's issuer name is one of the configured ones exactly, or none.
        guard ExactString.equal(issuer, StoreOperations.localIssuer) || issuers.containsExactly(issuer) else {
            throw .badRequest("unknown issuer '\(issuer)': one of \((issuers + [StoreOperations.localIssuer]).joined(separator: ", "))")
        }
        return Principal(issuer: issuer, sub: sub)
    }
}

extension StoreOperations {
    /// The store's figures as the `store` member of `stats`.
    public static func statistics(_ store: Store) -> [String: JSONValue] {
        let figures = store.statistics
        var members: [String: JSONValue] = [
            "sessions": .int(Int64(figures.sessions)),
            "users": .int(Int64(figures.users)),
            "wal_bytes": .int(Int64(figures.walBytes)),
            "records": .int(Int64(figures.records)),
            "syncs": .int(Int64(figures.syncs)),
            "records_per_sync": .double((figures.recordsPerSync * 100).rounded() / 100),
            "inline_syncs": .int(Int64(figures.inlineSyncs)),
            "inline_pauses": .int(Int64(figures.inlinePauses)),
            "failing": .bool(figures.failure != nil),
            "failures": .int(Int64(figures.failures)),
        ]
        if let failure = figures.failure { members["failure"] = .string(failure) }
        if let threshold = figures.snapshotAtWALBytes { members["snapshot_at_wal_bytes"] = .int(Int64(threshold)) }
        members["snapshots"] = .int(Int64(figures.snapshots))
        members["outbox"] = .int(Int64(figures.outbox))
        if let last = figures.lastSnapshot { members["last_snapshot"] = .object(last.json) }
        return ["store": .object(members)]
    }
}

extension StoreOperations {
    static func adminOperations(_ context: Context) -> [String: Operation] {
        let store = context.store
        let now = context.now
        return [
            "admin.snapshot": .async { request, requestContext throws(ProtocolError) in
                let arguments = Arguments(request)
                try arguments.finish()
                do throws(StoreError) {
                    let report = try await store.snapshot(now: now())
                    requestContext.logger.info("storage.snapshot", metadata: report.metadata.merging(["trigger": "admin"]) { $1 })
                    return report.json
                } catch {
                    requestContext.logger.error("storage.snapshot_failed", metadata: ["error": "\(error.message)", "trigger": "admin"])
                    throw StoreCommit.protocolError(error)
                }
            }
        ]
    }
}

extension SnapshotReport {
    /// `admin.snapshot`'s answer, and `stats.store.last_snapshot`.
    var json: [String: JSONValue] {
        [
            "start_lsn": .int(Int64(startLSN)), "sessions": .int(Int64(sessions)), "users": .int(Int64(users)),
            "bytes": .int(Int64(bytes)), "wal_bytes_removed": .int(Int64(walBytesRemoved)),
            "created_at": .int(createdAt), "ms": .int(Int64(milliseconds)),
            "longest_pause_us": .int(Int64(longestPauseMicroseconds)),
        ]
    }
}
