import KeyholeProtocol

/// The result of `session.create` (and `apple.sign_in`'s `session`): the token, handed out only here.
public struct CreatedSession: Sendable, Hashable {
    /// The session token (`kh_` and 43 base64url characters): a secret; never log it.
    public var token: String
    /// The session's id: not a secret; names it in lists and in `revokeSession(id:)`.
    public var id: String
    /// When the session ends at the latest, in seconds since 1970.
    public var expiresAt: Int64

    /// Reads `{"session", "id", "expires_at"}`; nil when a member is missing or of the wrong type.
    public init?(_ result: [String: JSONValue]) {
        guard let token = result["session"]?.stringValue, let id = result["id"]?.stringValue,
            let expiresAt = result["expires_at"]?.intValue
        else { return nil }
        self.token = token
        self.id = id
        self.expiresAt = expiresAt
    }
}

extension CreatedSession: CustomStringConvertible {
    /// The id and expiry, never the token.
    public var description: String { "CreatedSession(id: \(id), expiresAt: \(expiresAt))" }
}
