import KeyholeProtocol

/// What an issuer's tokens must claim to be accepted: who issued them, for whom, and how much clock
/// skew to forgive.
///
/// One policy per configured issuer. Several audiences are normal: a Sign in with Apple issuer has the
/// app's bundle ID for native sign-ins and a Services ID for the web.
public struct ClaimsPolicy: Sendable, Hashable {
    /// The leeway when none is configured, in seconds.
    public static let defaultLeeway: Int64 = 60

    /// The exact `iss` the issuer's tokens carry, such as `https://appleid.apple.com`.
    public let issuer: String
    /// Other spellings of `iss` the issuer uses (Google: `accounts.google.com` beside the URL).
    public let alternativeIssuers: Set<String>
    /// The audiences (client IDs) a token may be for.
    public let audiences: Set<String>
    /// Clock skew forgiven on `exp`, `nbf` and `iat`, in seconds; never negative.
    public let leeway: Int64
    /// How the issuer's claims are normalised.
    public let profile: ClaimsProfile
    /// Whether a request's nonce accepts a token without one (and without `nonce_supported: true`).
    /// Off by default (issue 26, finding 7): otherwise a captured token minted without a nonce passes
    /// any request's nonce check. For issuers known to drop nonces.
    public let allowsMissingNonce: Bool

    /// A policy. A negative `leeway` is taken as 0: a leeway that shortens a token's life would make
    /// fresh tokens fail on any skew, which is never what a configuration meant.
    public init(
        issuer: String, alternativeIssuers: Set<String> = [], audiences: Set<String>, leeway: Int64 = defaultLeeway,
        profile: ClaimsProfile = .standard, allowsMissingNonce: Bool = false
    ) {
        self.issuer = issuer
        self.alternativeIssuers = alternativeIssuers
        self.audiences = audiences
        self.leeway = max(0, leeway)
        self.profile = profile
        self.allowsMissingNonce = allowsMissingNonce
    }

    /// Whether a token's `iss` is this issuer's, compared byte for byte.
    public func acceptsIssuer(_ iss: String) -> Bool {
        ClaimsPolicy.exactlyEqual(iss, issuer) || alternativeIssuers.contains { ClaimsPolicy.exactlyEqual($0, iss) }
    }

    /// Whether `name` is one of the configured audiences, compared byte for byte.
    public func isConfiguredAudience(_ name: String) -> Bool {
        audiences.contains { ClaimsPolicy.exactlyEqual($0, name) }
    }

    /// Checks that a token for `tokenAudiences` is acceptable to a request that named `requested`.
    ///
    /// A request that names its audience narrows the check to that one, and it must itself be configured:
    /// otherwise a caller could make keyholed accept a token minted for some other client of the issuer.
    /// A request that names none accepts any configured audience.
    ///
    /// - Throws: `token_audience_invalid`.
    public func checkAudience(_ tokenAudiences: [String], requested: String?) throws(JOSEError) {
        if let requested {
            guard isConfiguredAudience(requested) else {
                throw JOSEError(.tokenAudienceInvalid, "the requested audience is not configured for this issuer")
            }
            guard tokenAudiences.contains(where: { ClaimsPolicy.exactlyEqual($0, requested) }) else {
                throw JOSEError(.tokenAudienceInvalid, "token is not for the requested audience")
            }
        } else {
            // A loop, not `contains(where: isConfiguredAudience)`: the method as a closure carried a
            // copy of the policy (its sets and strings counted), on every verification.
            for audience in tokenAudiences where isConfiguredAudience(audience) { return }
            throw JOSEError(.tokenAudienceInvalid, "token is for none of the issuer's audiences")
        }
    }

    /// Byte equality of UTF-8. Swift's `==` on strings uses Unicode canonical equivalence, but RFC 7519
    /// compares `iss`, `aud` and the like as exact strings, so two spellings must not match.
    static func exactlyEqual(_ lhs: String, _ rhs: String) -> Bool {
        ExactString.equal(lhs, rhs)
    }
}
