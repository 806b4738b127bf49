/// A live session as `session.get` and `session.list` see it (never its token).
public struct Session: Sendable, Equatable {
    /// Its id (not a secret).
    public var id: SessionID
    /// Whose session it is.
    public var principal: Principal
    /// When it was created.
    public var createdAt: Int64
    /// When it ends, however much it is used (absolute TTL).
    public var expiresAt: Int64
    /// When it was last presented.
    public var lastSeenAt: Int64
    /// How long it may go unused before it ends.
    public var idleSeconds: UInt32
    /// The caller's data: compact JSON of an object, or `nil`.
    public var data: [UInt8]?

    /// A session as a store read it.
    package init(
        id: SessionID, principal: Principal, createdAt: Int64, expiresAt: Int64, lastSeenAt: Int64, idleSeconds: UInt32, data: [UInt8]?
    ) {
        self.id = id
        self.principal = principal
        self.createdAt = createdAt
        self.expiresAt = expiresAt
        self.lastSeenAt = lastSeenAt
        self.idleSeconds = idleSeconds
        self.data = data
    }

    /// When it ends if not used again: its expiry, or its idle deadline if sooner.
    package var endsAt: Int64 { min(expiresAt, lastSeenAt + Int64(idleSeconds)) }
}
