import KeyholeProtocol

/// Who is at the other end of a connection and what it may ask: its credentials, the operation groups
/// the access policy allows it (worked out again only after a reload changed the policy), the uid its
/// connection counts towards, and how often it was refused (logged at notice the first time only).
struct ConnectionAccess {
    /// The peer, as the kernel gave it when the connection was accepted (`nil` until then, or if not).
    var peer: PeerCredentials?
    /// The operation groups the peer may use, worked out under policy version `version`.
    var allowed: AccessPolicy.Groups = []
    var version = UInt64.max
    /// The peer's uid, once this connection counts towards its per-uid limit.
    var countedUID: UInt32?
    /// A client looping on a denied operation must not flood the log: its first refusal is logged at
    /// notice, later ones at debug.
    var refusals = 0
    /// The peer sent what is not a frame: its uid's slot stays held a while after the close
    /// (`frame_error_hold`).
    var committedFrameError = false
    /// The peer's uid and the answer it is to get, while this connection, refused at connect, waits
    /// for it (`PeerLimits.holdRefusal`).
    var heldRefusal: (uid: UInt32, error: ProtocolError)?
}
