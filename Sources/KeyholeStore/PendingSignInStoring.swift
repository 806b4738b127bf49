import KeyholeProtocol

/// Pending web sign-ins kept where every host sees them (Sources/KeyholeServer/APPLE_WEB.md, "What
/// keyholed keeps"; POSTGRES.md, `apple_pending`): with several hosts behind a load balancer, the
/// browser's callback may reach another host than the one that started the sign-in. The local store
/// has no such need (one host keeps them in memory) and does not implement it.
public protocol PendingSignInStoring: Sendable {
    /// Keeps `pending`, and removes the states `dropped` (pushed out by this host's bounds) in the
    /// same change.
    func addPending(_ pending: PendingSignIn, dropping dropped: [[UInt8]]) async throws(StoreError)

    /// Takes the record of `stateHash` out (single use, whatever the caller then finds), if any.
    func takePending(stateHash: [UInt8]) async throws(StoreError) -> PendingSignIn?
}

/// What a web sign-in's start leaves for its callback: digests of its secrets, never the secrets.
public struct PendingSignIn: Sendable, Equatable {
    /// SHA-256 of the state, of the binding cookie's value, and of the nonce: 32 bytes each.
    public var stateHash: [UInt8]
    public var bindingHash: [UInt8]
    public var nonceHash: [UInt8]
    public var clientID: String
    public var redirectURI: String
    public var returnTo: String
    /// The uid that started it (its bound).
    public var peer: UInt32
    public var expiresAt: Int64

    /// A record.
    public init(
        stateHash: [UInt8], bindingHash: [UInt8], nonceHash: [UInt8], clientID: String, redirectURI: String, returnTo: String, peer: UInt32,
        expiresAt: Int64
    ) {
        self.stateHash = stateHash
        self.bindingHash = bindingHash
        self.nonceHash = nonceHash
        self.clientID = clientID
        self.redirectURI = redirectURI
        self.returnTo = returnTo
        self.peer = peer
        self.expiresAt = expiresAt
    }
}
