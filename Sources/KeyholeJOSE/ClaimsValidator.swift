import KeyholeProtocol
import NIOCore

/// Checks a JWT's claims (RFC 7519 section 4.1, OpenID Connect Core section 3.1.3.7) against an
/// issuer's policy, the request and the time. It runs only on payloads whose signature has verified.
///
/// The checks come in two parts. `validate` reads the payload once: its shape, `iss`, `sub`, the types
/// of `aud` and the time claims, and the profile's normalisation. `check` is what depends on the request
/// (audience, nonce) and on the clock (`exp`, `nbf`, `iat`); `validate` runs it too, and a cache of
/// verified tokens runs it again on every hit.
///
/// Time rules, with `leeway` forgiving clock skew both ways: a token is expired from `exp + leeway` on
/// (the instant itself is expired, as RFC 7519 requires the current time to be before `exp`), and not
/// yet valid while `now < nbf - leeway` or `now < iat - leeway` (the instant itself is valid, as
/// `nbf` is the first valid instant). Every comparison is written so that a NaN fails it.
///
/// When several rules fail, the error is the first of: `token_malformed` (payload not a JSON object),
/// `token_issuer_unknown`, `token_claim_invalid` (`sub`, time claim types, profile), then
/// `token_audience_invalid` for the shape of `aud`, and `check`'s order: audience, `exp`, `nbf`,
/// `iat`, nonce.
public enum ClaimsValidator {
    /// Parses `payload` as a JSON object and validates it.
    ///
    /// - Parameters:
    ///   - now: the current time in seconds since 1970 (injected, so that tests fix the clock).
    ///   - audience: the audience the request names, if any; it must be one of `policy.audiences`.
    ///   - nonce: the nonce the request passes, if any.
    /// - Throws: `token_malformed` when the payload is not a JSON object, else as `validate(claims:...)`.
    public static func validate(
        payload: [UInt8], policy: ClaimsPolicy, now: Double, audience: String?, nonce: String?
    ) throws(JOSEError) -> VerifiedToken {
        let value: JSONValue
        do {
            value = try JSONValue.parse(bytes: payload)
        } catch {
            throw .malformed("payload: \(error.message)")
        }
        guard case .object(let claims) = value else { throw .malformed("payload is not a JSON object") }
        return try validate(claims: claims, policy: policy, now: now, audience: audience, nonce: nonce)
    }

    /// Validates a JWT claims set and returns it normalised.
    ///
    /// - Throws: `token_issuer_unknown` when `iss` is not the policy's issuer (missing or not a string
    ///   included); `token_claim_invalid` when `sub` is not a non-empty string, `exp` is missing, a time
    ///   claim is not a finite number (strings such as `"1700000000"` included), or the profile cannot
    ///   normalise a claim; `token_audience_invalid` when `aud` is missing, is neither a string nor an
    ///   array of strings, or holds no acceptable audience; and whatever `check` throws.
    public static func validate(
        claims: [String: JSONValue], policy: ClaimsPolicy, now: Double, audience: String?, nonce: String?
    ) throws(JOSEError) -> VerifiedToken {
        guard case .string(let issuer)? = claims["iss"], policy.acceptsIssuer(issuer) else {
            throw JOSEError(.tokenIssuerUnknown, "token's 'iss' is not the issuer's")
        }
        guard case .string(let subject)? = claims["sub"], !subject.isEmpty else {
            throw JOSEError(.tokenClaimInvalid, "claim 'sub' is missing, empty or not a string")
        }
        guard let expiresAt = try time(claims, "exp") else {
            throw JOSEError(.tokenClaimInvalid, "claim 'exp' is missing")
        }
        let notBefore = try time(claims, "nbf")
        let issuedAt = try time(claims, "iat")
        var normalised = claims
        let changed = try policy.profile.normalise(&normalised)
        let audiences = try self.audiences(claims["aud"])

        let token = VerifiedToken(
            issuer: issuer, subject: subject, audiences: audiences, expiresAt: expiresAt, notBefore: notBefore,
            issuedAt: issuedAt, claims: normalised, claimsAreVerbatim: !changed
        )
        try check(token, policy: policy, now: now, audience: audience, nonce: nonce)
        return token
    }

    /// The checks that depend on the request and the clock, for a token that passed `validate` under the
    /// same policy.
    ///
    /// - Throws: `token_audience_invalid` (see `ClaimsPolicy.checkAudience`), `token_expired`,
    ///   `token_not_yet_valid` (`nbf` or `iat` beyond the leeway in the future), `token_nonce_mismatch`.
    public static func check(
        _ token: VerifiedToken, policy: ClaimsPolicy, now: Double, audience: String?, nonce: String?
    ) throws(JOSEError) {
        try policy.checkAudience(token.audiences, requested: audience)
        let leeway = Double(policy.leeway)
        guard !token.isExpired(at: now, leeway: policy.leeway) else {
            throw JOSEError(.tokenExpired, "token expired (exp plus \(policy.leeway) s leeway has passed)")
        }
        if let notBefore = token.notBefore {
            guard notBefore - leeway <= now else {
                throw JOSEError(.tokenNotYetValid, "token is not valid yet (nbf is beyond the leeway in the future)")
            }
        }
        // Issue 3 asks for this beyond RFC 7519: an `iat` past the leeway means a clock is wrong, and
        // the token's lifetime as the issuer meant it (`exp - iat`) cannot be trusted.
        if let issuedAt = token.issuedAt {
            guard issuedAt - leeway <= now else {
                throw JOSEError(.tokenNotYetValid, "token was issued in the future (iat is beyond the leeway)")
            }
        }
        if let nonce {
            try checkNonce(token.nonceClaim, requested: nonce, allowMissing: policy.allowsMissingNonce)
        }
    }

    /// The token's `nonce` must be the request's, or the lowercase hex SHA-256 of it: Apple's native
    /// flow has the app pass Apple the hash of its nonce, so the token carries the hash.
    ///
    /// A token without `nonce` does not match (issue 26, finding 7): a request that passes a nonce
    /// wants a token made for it, and accepting one without would let any captured nonce-less token
    /// through. Only `allowMissing` (the issuer's `allow_missing_nonce`, for issuers that drop nonces)
    /// accepts it, and even then not a token that says `nonce_supported: true`: its client supports
    /// nonces, so it was not made for this request. Any other value of `nonce` (a number, null) does
    /// not match.
    private static func checkNonce(_ claim: VerifiedToken.NonceClaim, requested: String, allowMissing: Bool) throws(JOSEError) {
        switch claim {
        case .value(let tokenNonce):
            guard
                ClaimsPolicy.exactlyEqual(tokenNonce, requested)
                    || SHA256.hexDigest(requested.utf8).map({ ClaimsPolicy.exactlyEqual(tokenNonce, $0) }) == true
            else {
                throw JOSEError(.tokenNonceMismatch, "token's nonce is neither the request's nor its SHA-256")
            }
        case .absent(supported: true):
            throw JOSEError(.tokenNonceMismatch, "token has no nonce but says nonce_supported")
        case .absent(supported: false):
            guard allowMissing else {
                throw JOSEError(.tokenNonceMismatch, "token has no nonce, and the request passes one (allow_missing_nonce is off for this issuer)")
            }
        case .invalid:
            throw JOSEError(.tokenNonceMismatch, "token's nonce is not a string")
        }
    }

    /// `aud` as a list: a single string or an array of strings (RFC 7519 section 4.1.3).
    private static func audiences(_ value: JSONValue?) throws(JOSEError) -> [String] {
        switch value {
        case .string(let audience)?:
            return [audience]
        case .array(let elements)?:
            var audiences: [String] = []
            audiences.reserveCapacity(elements.count)
            for element in elements {
                guard case .string(let audience) = element else {
                    throw JOSEError(.tokenAudienceInvalid, "claim 'aud' has an element that is not a string")
                }
                audiences.append(audience)
            }
            return audiences
        case nil:
            throw JOSEError(.tokenAudienceInvalid, "claim 'aud' is missing")
        case .some:
            throw JOSEError(.tokenAudienceInvalid, "claim 'aud' is neither a string nor an array of strings")
        }
    }

    /// A NumericDate claim: `nil` when absent; a finite JSON number, never a string.
    private static func time(_ claims: [String: JSONValue], _ name: String) throws(JOSEError) -> Double? {
        switch claims[name] {
        case nil:
            return nil
        case .int(let seconds)?:
            return Double(seconds)
        case .double(let seconds)? where seconds.isFinite:
            return seconds
        case .some:
            throw JOSEError(.tokenClaimInvalid, "claim '\(name)' is not a number")
        }
    }
}
