import KeyholeProtocol

/// The claims of a token whose signature verified and whose claims passed the issuer's policy.
///
/// The registered claims are lifted out with their types checked; `claims` keeps the whole payload
/// (normalised by the issuer's profile) for callers that need more. Times are seconds since 1970 as
/// `Double`: RFC 7519's NumericDate may have a fraction, and a `Double` holds any JSON number the parser
/// accepts, where converting to an integer could trap on a hostile `exp` such as 1e300.
public struct VerifiedToken: Sendable, Hashable {
    /// `iss`.
    public let issuer: String
    /// `sub`, never empty.
    public let subject: String
    /// `aud`, as a list even when the token has a single string.
    public let audiences: [String]
    /// `exp`.
    public let expiresAt: Double
    /// `nbf`, when present.
    public let notBefore: Double?
    /// `iat`, when present.
    public let issuedAt: Double?
    /// The whole payload, normalised by the issuer's profile.
    public private(set) var claims: [String: JSONValue]
    /// Whether `claims` is the payload as sent (the profile changed nothing), so that the payload's
    /// bytes, already checked as strict JSON, may stand for `claims` in an answer.
    public private(set) var claimsAreVerbatim: Bool
    /// `email`, when it is a string.
    public let email: String?
    /// `email_verified`, when it is a boolean (after the profile's normalisation).
    public let emailVerified: Bool?
    /// `is_private_email` (Apple's relay addresses), when it is a boolean (after normalisation).
    public let isPrivateEmail: Bool?
    /// `real_user_status` (Apple's fraud signal), when it is an integer.
    public let realUserStatus: Int64?
    /// `transfer_sub` (Sign in with Apple, while apps move between teams): the user's transfer
    /// identifier, by which the receiving team finds the record the sending team had.
    public let transferSub: String?

    /// What the token says of nonces, read once from `claims` so that checks need not keep them.
    public enum NonceClaim: Sendable, Hashable {
        /// No `nonce`; `supported` when `nonce_supported` is `true` or `"true"`.
        case absent(supported: Bool)
        /// A string `nonce`.
        case value(String)
        /// A `nonce` that is not a string.
        case invalid
    }

    /// The token's `nonce` claim.
    public let nonceClaim: NonceClaim

    /// The token's `nonce`, when it is a string.
    public var nonce: String? {
        if case .value(let nonce) = nonceClaim { return nonce }
        return nil
    }

    /// This token without `claims` (every lifted field kept): what a cache keeps when it also keeps
    /// the answer, so that a cached token costs one small allocation rather than the whole payload's.
    public func strippingClaims() -> VerifiedToken {
        var copy = self
        copy.claims = [:]
        copy.claimsAreVerbatim = false
        return copy
    }

    /// Whether `expiresAt` plus `leeway` seconds has passed at `now`: a token is expired from the instant
    /// `exp + leeway` on (RFC 7519: the current time must be *before* `exp`). Written so that a NaN
    /// anywhere counts as expired.
    public func isExpired(at now: Double, leeway: Int64) -> Bool {
        !(now < expiresAt + Double(leeway))
    }

    /// Reads the typed fields out of `claims`, which the validator has already checked.
    init(
        issuer: String, subject: String, audiences: [String], expiresAt: Double, notBefore: Double?,
        issuedAt: Double?, claims: [String: JSONValue], claimsAreVerbatim: Bool = false
    ) {
        self.claimsAreVerbatim = claimsAreVerbatim
        self.issuer = issuer
        self.subject = subject
        self.audiences = audiences
        self.expiresAt = expiresAt
        self.notBefore = notBefore
        self.issuedAt = issuedAt
        self.claims = claims
        self.email = claims["email"]?.stringValue
        self.emailVerified = claims["email_verified"]?.boolValue
        self.isPrivateEmail = claims["is_private_email"]?.boolValue
        self.realUserStatus = claims["real_user_status"]?.intValue
        self.transferSub = claims["transfer_sub"]?.stringValue.flatMap { $0.isEmpty || $0.utf8.count > 255 ? nil : $0 }
        switch claims["nonce"] {
        case .string(let nonce)?:
            nonceClaim = .value(nonce)
        case nil:
            // The string form is honoured too, so that no spelling of "supported" slips through.
            switch claims["nonce_supported"] {
            case .bool(true)?, .string("true")?: nonceClaim = .absent(supported: true)
            default: nonceClaim = .absent(supported: false)
            }
        case .some:
            nonceClaim = .invalid
        }
    }
}
