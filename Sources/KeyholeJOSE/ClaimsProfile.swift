import KeyholeProtocol

/// How an issuer's claims are read: issuers agree on the registered claims (RFC 7519, OpenID Connect
/// Core) but not always on the JSON types of the others.
public enum ClaimsProfile: String, Sendable, Hashable, CaseIterable {
    /// OpenID Connect as written: claims pass through unchanged; `email_verified` and
    /// `is_private_email` are reported only when they are booleans.
    case standard
    /// Sign in with Apple. Its older tokens carry `email_verified` and `is_private_email` as the strings
    /// `"true"`/`"false"`, newer ones as booleans, and `real_user_status` is an integer (0 unsupported,
    /// 1 unknown, 2 likely real); this profile makes the first two booleans and checks the third.
    case apple

    /// Normalises `claims` in place; claims the profile does not know are left untouched.
    ///
    /// - Returns: whether any claim changed (the claims are otherwise the payload as sent).
    /// - Throws: `token_claim_invalid` when a claim the profile knows has a value it cannot read, such as
    ///   `email_verified: "yes"` or `real_user_status: 1.5` under `.apple`.
    @discardableResult
    public func normalise(_ claims: inout [String: JSONValue]) throws(JOSEError) -> Bool {
        var changed = false
        switch self {
        case .standard:
            return false
        case .apple:
            for name in ["email_verified", "is_private_email"] {
                guard let value = claims[name] else { continue }
                let boolean = try Self.appleBoolean(value, name: name)
                if value != .bool(boolean) {
                    claims[name] = .bool(boolean)
                    changed = true
                }
            }
            if let status = claims["real_user_status"] {
                // An integer already; refusing anything else (2.0, "2") keeps the claim's type stable
                // for every consumer of `claims`.
                guard case .int = status else {
                    throw JOSEError(.tokenClaimInvalid, "claim 'real_user_status' is not an integer")
                }
            }
        }
        return changed
    }

    /// A boolean claim Apple may send as a JSON boolean or as the exact strings "true" and "false".
    private static func appleBoolean(_ value: JSONValue, name: String) throws(JOSEError) -> Bool {
        guard let bool = appleBoolean(value) else {
            throw JOSEError(.tokenClaimInvalid, "claim '\(name)' is neither a boolean nor \"true\"/\"false\"")
        }
        return bool
    }

    /// A boolean as Apple sends them (in tokens, notifications and its REST answers): a JSON boolean
    /// or the exact strings "true" and "false"; `nil` for anything else.
    public static func appleBoolean(_ value: JSONValue?) -> Bool? {
        switch value {
        case .bool(let bool)?: bool
        case .string("true")?: true
        case .string("false")?: false
        default: nil
        }
    }
}
