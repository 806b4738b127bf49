import KeyholeProtocol

/// Verifies a compact JWS against an issuer's key set and allowed algorithms.
///
/// The token only ever *names* an algorithm and a key: the algorithm must be on the issuer's allow-list
/// and the key must come from the issuer's set and permit that algorithm (its type, curve, `alg`, `use`
/// and `key_ops`). This is what defeats the classic JWT attacks: `alg: none`, an RSA public key used as
/// an HMAC secret, and keys embedded in the header (`jwk`, `jku`, `x5c`, `x5u` are never read).
public struct JWSVerifier: Sendable {
    /// The issuer's keys.
    public let keys: JWKSet
    /// The algorithms the issuer may sign with; `JWSAlgorithm` already leaves out HMAC and `none`.
    public let algorithms: Set<JWSAlgorithm>

    /// The most keys tried for one token (keys sharing its `kid`).
    public static let maximumCandidates = 4

    /// A verifier for tokens signed with one of `keys`, by one of `algorithms`.
    public init(keys: JWKSet, algorithms: Set<JWSAlgorithm>) {
        self.keys = keys
        self.algorithms = algorithms
    }

    /// Checks the algorithm, picks the key and verifies the signature.
    ///
    /// - Returns: the key that verified the signature, so that a cache of verified tokens can drop the
    ///   tokens a key signed when that key leaves the issuer's set.
    /// - Throws: `token_alg_not_allowed` when `alg` is not one keyholed implements or not on the
    ///   allow-list (HS256, `none` and ES512 always are not); `token_key_unknown` when no key fits
    ///   (see `candidates(for:algorithm:)`); `token_signature_invalid` when the signature does not verify.
    public func verify(_ jws: CompactJWS) throws(JOSEError) -> VerificationKey {
        // The raw value is matched exactly, so "none", "NONE" and "rs256" are all unknown.
        guard let algorithm = JWSAlgorithm(rawValue: jws.algorithm), algorithms.contains(algorithm) else {
            throw JOSEError(.tokenAlgNotAllowed, "algorithm '\(Self.printable(jws.algorithm))' is not allowed")
        }
        let candidates = try candidates(for: jws.keyID, algorithm: algorithm)
        for key in candidates
        where key.verify(signature: jws.signature, message: jws.signingInput, algorithm: algorithm) {
            return key
        }
        throw JOSEError(.tokenSignatureInvalid, "signature does not verify")
    }

    /// The keys a token may have been signed with.
    ///
    /// With a `kid`: the keys of the set with that `kid` that permit `algorithm`. Key IDs should be
    /// unique in a set, but RFC 7517 section 4.5 allows repeats, so up to `maximumCandidates` such keys
    /// are tried, in set order. Without a `kid`: the one key of the set that
    /// permits `algorithm`; when several do, which one signed would be a guess, and trying them all
    /// would let a token without `kid` cost several signature checks, so the token is refused.
    ///
    /// - Throws: `token_key_unknown` when there is no candidate.
    func candidates(for keyID: String?, algorithm: JWSAlgorithm) throws(JOSEError) -> [VerificationKey] {
        if let keyID {
            // At most a few: a hostile set repeating one kid must not make one token cost many checks.
            let matching = Array(keys.keys.lazy.filter { $0.kid.map { ExactString.equal($0, keyID) } == true && $0.permits(algorithm) }.prefix(Self.maximumCandidates))
            guard !matching.isEmpty else {
                // The kid is not echoed: it is whatever the client chose, up to the length of the token.
                throw JOSEError(
                    .tokenKeyUnknown, "no key of the issuer's set has the token's kid and permits \(algorithm.rawValue)"
                )
            }
            return matching
        }
        let permitting = keys.keys.filter { $0.permits(algorithm) }
        guard permitting.count == 1 else {
            throw JOSEError(
                .tokenKeyUnknown,
                permitting.isEmpty
                    ? "token has no kid and no key of the issuer's set permits \(algorithm.rawValue)"
                    : "token has no kid and \(permitting.count) keys of the issuer's set permit \(algorithm.rawValue)"
            )
        }
        return permitting
    }

    /// A short, printable rendering of a client-supplied algorithm name for an error message.
    private static func printable(_ name: String) -> String {
        let limit = 16
        let characters = name.unicodeScalars.prefix(limit).map {
            (0x20..<0x7F).contains($0.value) ? Character($0) : "?"
        }
        return String(characters) + (name.unicodeScalars.count > limit ? "..." : "")
    }
}
