import KeyholeApple
import KeyholeIssuers
import KeyholeJOSE
import KeyholeProtocol
import KeyholeStore
import Logging

/// Sign in with Apple's server side (issue 5): `apple.sign_in`, `apple.notification`,
/// `apple.pending`, `apple.refresh_check`, `apple.transfer.export`, `apple.transfer.import`; and on
/// the web (issue 29): `apple.authorize`, `apple.callback`.
public enum AppleOperations {
    /// Which issuer and clients are Apple's, and how to reach Apple.
    public struct Configuration: Sendable {
        /// The name of the `[[issuer]]` whose tokens are Sign in with Apple's.
        public var issuer = "apple"
        /// The bundle IDs and Services IDs keyholed signs in for.
        public var clientIDs: Set<String>
        /// The redirect URI of each web client (Services ID), sent with its code exchanges.
        public var redirectURIs: [String: String] = [:]
        /// Apple's endpoints and the key that seals refresh tokens; without them, no code exchange.
        public var exchange: Exchange?
        /// What a withdrawn consent does to the user's sessions (refresh checks and notifications).
        public var onRevoked = AppleRefreshChecks.Configuration.OnRevoked.revokeSessions
        /// Sign in with Apple on the web: `apple.authorize` and `apple.callback`.
        public var web = Web()

        /// A configuration for `clientIDs`.
        public init(clientIDs: Set<String>) {
            self.clientIDs = clientIDs
        }
    }

    /// The web flow's settings (APPLE_WEB.md; `[apple] web_*`).
    public struct Web: Sendable, Equatable {
        /// The Services ID `apple.authorize` uses by default; `nil`: the one client id with a redirect URI.
        public var clientID: String?
        /// The origins a `return_to` URL may name (made by `origin(_:)`); paths are always allowed.
        public var returnOrigins: [String] = []
        /// The binding cookie's name.
        public var cookieName = "__Host-kh_apple"
        /// Apple's base URL, under which the browser is sent to `/auth/authorize`.
        public var endpoint = "https://appleid.apple.com"
        /// How long a pending authorization waits for its callback, in seconds.
        public var lifetime: Int64 = 600
        /// Pending authorizations one uid may have; past it, its oldest goes. Read at start-up.
        public var pendingPerPeer = 10_000
        /// Pending authorizations in all. Read at start-up.
        public var pendingMax = 100_000

        /// The defaults.
        public init() {}

        /// A configured origin in its one form (`https://host[:port]`, lower case, no trailing slash;
        /// `http` only to a loopback host), or `nil` when it is not one.
        public static func origin(_ text: String) -> String? { AppleWebReturnTo.origin(text) }

        /// Whether `name` may name a cookie: an RFC 6265 token of at most 64 bytes.
        public static func isCookieName(_ name: String) -> Bool {
            (1...64).contains(name.utf8.count)
                && name.utf8.allSatisfy { $0 > 0x20 && $0 < 0x7F && !"()<>@,;:\\\"/[]?={}".utf8.contains($0) }
        }
    }

    /// What code exchange needs.
    public struct Exchange: Sendable {
        /// Apple's REST endpoints, with the team's client secrets.
        public var client: AppleClient
        /// Seals refresh tokens before they are stored.
        public var sealingKey: SealingKey

        /// Code exchange through `client`, refresh tokens sealed with `sealingKey`.
        public init(client: AppleClient, sealingKey: SealingKey) {
            self.client = client
            self.sealingKey = sealingKey
        }
    }

    /// The operations. Without `configuration` (no `[apple]` section) they answer `not_configured`;
    /// `revocations` lists what is owed to Apple.
    public static func make(
        configuration: Configuration?, registry: IssuerRegistry, store: any AppleStoring, sessions: StoreOperations.Configuration,
        revocations: AppleRevocations? = nil, refreshChecks: AppleRefreshChecks? = nil, now: @escaping @Sendable () -> Double
    ) -> [String: Operation] {
        make(
            configuration: configuration.map { Reloadable($0) }, registry: registry, store: store, sessions: Reloadable(sessions),
            revocations: revocations, refreshChecks: refreshChecks, now: now)
    }

    /// The operations, reading `settings` and `sessions` as a reload leaves them, once per request.
    /// `web`: the web flow they share with the HTTP listener (a new one when `nil`).
    public static func make(
        configuration settings: Reloadable<Configuration>?, registry: IssuerRegistry, store: any AppleStoring,
        sessions sessionSettings: Reloadable<StoreOperations.Configuration>, revocations: AppleRevocations? = nil,
        refreshChecks: AppleRefreshChecks? = nil, web: AppleWebSignIn? = nil, now: @escaping @Sendable () -> Double
    ) -> [String: Operation] {
        let seen = SeenNotifications()
        let web = web ?? AppleWebSignIn(configuration: settings, registry: registry, store: store, sessions: sessionSettings, now: now)
        return [
            "apple.authorize": .async { request, context throws(ProtocolError) in
                try await web.authorize(request, peer: context.peerUID)
            },
            "apple.callback": .async { request, context throws(ProtocolError) in
                try await web.callback(request, logger: context.logger)
            },
            "apple.notification": .async { request, context throws(ProtocolError) in
                guard let configuration = settings?.current else {
                    throw .notConfigured("apple.notification needs an [apple] section in keyholed.toml")
                }
                let notification = Notification(
                    configuration: configuration, registry: registry, store: store, seen: seen, now: now, logger: context.logger)
                return try await notification.run(request)
            },
            "apple.transfer.export": .async { request, context throws(ProtocolError) in
                guard let configuration = settings?.current else { throw .notConfigured("apple.transfer.export needs an [apple] section in keyholed.toml") }
                return try await Transfer(configuration: configuration, store: store, now: now, logger: context.logger).export(request)
            },
            "apple.transfer.import": .async { request, context throws(ProtocolError) in
                guard let configuration = settings?.current else { throw .notConfigured("apple.transfer.import needs an [apple] section in keyholed.toml") }
                return try await Transfer(configuration: configuration, store: store, now: now, logger: context.logger).import(request)
            },
            "apple.refresh_check": .async { request, _ throws(ProtocolError) in
                var arguments = Arguments(request)
                let sub = try arguments.string("sub", required: true, maxBytes: Principal.maximumFieldBytes)!
                try arguments.finish()
                guard let configuration = settings?.current else { throw .notConfigured("apple.refresh_check needs an [apple] section in keyholed.toml") }
                guard let refreshChecks else {
                    throw .notConfigured("refresh tokens are checked only with [apple] team_id, key_id, private_key_file and store_key_file")
                }
                let principal = Principal(issuer: configuration.issuer, sub: sub)
                switch await refreshChecks.check(principal) {
                case .valid:
                    return ["result": "valid"]
                case .consentRevoked(let sessions):
                    return ["result": "consent_revoked", "sessions_revoked": .int(Int64(sessions))]
                case .noToken:
                    guard try await StoreCommit.stored({ () async throws(StoreError) in try await store.user(principal) }) != nil else {
                        throw .userNotFound(principal.description)
                    }
                    return ["result": "no_token"]
                case .failed(let error):
                    throw error.protocolError
                case .unreadable:
                    throw .internal("the user's refresh token does not open with the store key: was store_key_file replaced?")
                case .skipped:
                    // Only the background walk skips (a check another host took): never asked here.
                    return ["result": "skipped"]
                case .storageFailed(let error):
                    throw StoreCommit.protocolError(error)
                }
            },
            "apple.pending": .async { request, _ throws(ProtocolError) in
                try Arguments(request).finish()
                guard settings != nil else { throw .notConfigured("apple.pending needs an [apple] section in keyholed.toml") }
                let pending = try await revocations?.pending() ?? []
                return ["pending": .array(pending), "count": .int(Int64(pending.count))]
            },
            "apple.sign_in": .async { request, context throws(ProtocolError) in
                guard let configuration = settings?.current else {
                    throw .notConfigured("apple.sign_in needs an [apple] section in keyholed.toml")
                }
                let signIn = SignIn(
                    configuration: configuration, registry: registry, store: store, sessions: sessionSettings.current, now: now,
                    logger: context.logger)
                return try await signIn.run(request)
            },
        ]
    }

    /// The `apple` member of `stats`.
    public static func statistics(revocations: AppleRevocations, refreshChecks: AppleRefreshChecks) -> [String: JSONValue] {
        ["revocations": .object(revocations.statistics), "refresh_checks": .object(refreshChecks.statistics)]
    }
}
