import KeyholeIssuers
import KeyholeProtocol
import KeyholeStore
import Logging

/// Sign in with Apple on the web for every way in: the operations `apple.authorize` and
/// `apple.callback`, and the HTTP listener's pages (APPLE_WEB.md, "Over HTTP"). One per keyholed,
/// so that an authorization started one way is completed the other, and its bounds hold for both.
public final class AppleWebSignIn: Sendable {
    let settings: Reloadable<AppleOperations.Configuration>?
    let registry: IssuerRegistry
    let store: any AppleStoring
    let sessions: Reloadable<StoreOperations.Configuration>
    let now: @Sendable () -> Double
    let flow: AppleWebFlow

    /// The web flow of `[apple]` (`configuration`, `nil` without it: every call is `not_configured`),
    /// signing users in to `store` with `sessions`' defaults; the pending bounds are read now.
    public init(
        configuration: Reloadable<AppleOperations.Configuration>?, registry: IssuerRegistry, store: any AppleStoring,
        sessions: Reloadable<StoreOperations.Configuration>, now: @escaping @Sendable () -> Double
    ) {
        self.settings = configuration
        self.registry = registry
        self.store = store
        self.sessions = sessions
        self.now = now
        let web = configuration?.current.web ?? AppleOperations.Web()
        // A store shared by several hosts keeps the pending sign-ins too: the callback may reach another host.
        flow = AppleWebFlow(configuration: .init(perPeer: web.pendingPerPeer, total: web.pendingMax), shared: store as? any PendingSignInStoring)
    }

    /// The settings a request is served with: the running `[apple]` section's.
    public var configuration: AppleOperations.Configuration? { settings?.current }

    /// `apple.authorize` for `request`'s arguments, asked by a peer of uid `peer`.
    public func authorize(_ request: Request, peer: UInt32?) async throws(ProtocolError) -> [String: JSONValue] {
        guard let configuration = settings?.current else {
            throw .notConfigured("apple.authorize needs an [apple] section in keyholed.toml")
        }
        return try await AppleOperations.WebAuthorization(configuration: configuration, flow: flow, now: now).run(request, peer: peer)
    }

    /// Signs the session of `token` out (`false` when there was no live one), once the change is
    /// durable: the HTTP listener's `/logout`.
    public func signOut(token: String) async throws(ProtocolError) -> Bool {
        let time = Int64(now().rounded(.down))
        return try await StoreCommit.stored { () async throws(StoreError) in try await store.revokeSession(token: token, now: time) }
    }

    /// `apple.callback` for `request`'s arguments.
    public func callback(_ request: Request, logger: Logger) async throws(ProtocolError) -> [String: JSONValue] {
        guard let configuration = settings?.current else {
            throw .notConfigured("apple.callback needs an [apple] section in keyholed.toml")
        }
        let signIn = AppleOperations.SignIn(
            configuration: configuration, registry: registry, store: store, sessions: sessions.current, now: now, logger: logger)
        return try await AppleOperations.WebCallback(signIn: signIn, flow: flow).run(request)
    }
}
