/// Verifies an issuer's identity tokens end to end: compact JWS parsing, algorithm and key selection,
/// signature, then claims.
///
/// The order matters: nothing of the payload is read before its signature has verified, so a forged
/// token can only ever learn that it is malformed or not signed by the issuer, never which claim check
/// it would have failed.
public struct JWTVerifier: Sendable {
    /// The signature part: the issuer's keys and algorithms.
    public let signatures: JWSVerifier
    /// The claims part: issuer, audiences, leeway, profile.
    public let policy: ClaimsPolicy

    /// A verifier for tokens signed with one of `keys` by one of `algorithms` whose claims satisfy `policy`.
    public init(keys: JWKSet, algorithms: Set<JWSAlgorithm>, policy: ClaimsPolicy) {
        self.signatures = JWSVerifier(keys: keys, algorithms: algorithms)
        self.policy = policy
    }

    /// Verifies `token`.
    ///
    /// - Parameters:
    ///   - token: a compact JWS, without surrounding whitespace.
    ///   - now: the current time in seconds since 1970.
    ///   - audience: the audience the request names, if any; it must be configured in the policy.
    ///   - nonce: the request's nonce, if any; the token must carry it or its lowercase hex SHA-256.
    /// - Throws: the `token_*` errors of `CompactJWS.parse`, `JWSVerifier.verify` and
    ///   `ClaimsValidator.validate`, in that order.
    public func verify(
        _ token: some StringProtocol, now: Double, audience: String? = nil, nonce: String? = nil
    ) throws(JOSEError) -> VerifiedToken {
        try verifyWithKey(token, now: now, audience: audience, nonce: nonce).token
    }

    /// Like `verify`, also returning the key that verified the signature (a cache of verified tokens
    /// needs it to drop a key's tokens when the key leaves the issuer's set).
    public func verifyWithKey(
        _ token: some StringProtocol, now: Double, audience: String? = nil, nonce: String? = nil
    ) throws(JOSEError) -> (token: VerifiedToken, key: VerificationKey) {
        try verifyWithKey(CompactJWS.parse(token), now: now, audience: audience, nonce: nonce)
    }

    /// Like `verifyWithKey(_:now:audience:nonce:)` for a token already parsed (to route it by its `iss`).
    public func verifyWithKey(
        _ jws: CompactJWS, now: Double, audience: String? = nil, nonce: String? = nil
    ) throws(JOSEError) -> (token: VerifiedToken, key: VerificationKey) {
        let key = try signatures.verify(jws)
        let verified = try ClaimsValidator.validate(
            payload: jws.payload, policy: policy, now: now, audience: audience, nonce: nonce
        )
        return (verified, key)
    }
}
