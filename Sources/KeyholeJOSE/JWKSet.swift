import KeyholeProtocol
import NIOCore

/// An issuer's key set (RFC 7517 section 5), every usable key already made into a `VerificationKey`.
///
/// Keys keyholed cannot use (encryption keys, unsupported curves, short or oversized RSA keys) are
/// skipped, not fatal: issuers publish mixed sets, and one odd key must not stop the others from
/// verifying. A document of more than `maximumKeys` entries is refused whole (issue 26, finding 5):
/// issuers publish a handful, and taking only the first hundred would make which keys verify depend
/// on their order in a document that is hostile or broken anyway.
///
/// Making a key costs libcrypto work (an RSA public-key check grows with the modulus), so a set made
/// from a refetched document takes every entry it already had from the previous set instead of
/// making it again (`init(json:reusing:)`): a refresh of an unchanged set makes no key at all.
public struct JWKSet: Sendable {
    /// The usable keys, in document order.
    public let keys: [VerificationKey]
    /// Why each unusable key was skipped, for `jwks.status` and logs.
    public let skipped: [String]
    /// How many entries this set had to make into keys (or fail to) rather than take from the previous
    /// set or an identical entry before them: 0 for a refetch of an unchanged document.
    public let built: Int
    /// The SHA-256 of each refused entry's canonical form, with why it was refused, so that a refetch
    /// refuses it again without making it again.
    private let refusals: [[UInt8]: String]

    /// The most entries one document may hold (and so the most keys); more and it is refused.
    public static let maximumKeys = 100

    /// A set of already-made keys.
    public init(keys: [VerificationKey]) {
        self.init(keys: keys, skipped: [], built: 0, refusals: [:])
    }

    private init(keys: [VerificationKey], skipped: [String], built: Int, refusals: [[UInt8]: String]) {
        self.keys = keys
        self.skipped = skipped
        self.built = built
        self.refusals = refusals
    }

    /// This set with each key that `previous` also holds (same JWK, member for member) replaced by
    /// `previous`'s object for it: a refetch that changes nothing keeps every key's identity, so a
    /// cache of verified tokens, which remembers the key that verified each token, stays warm.
    public func reusingKeys(of previous: JWKSet?) -> JWKSet {
        guard let previous, !previous.keys.isEmpty else { return self }
        let known = Dictionary(previous.keys.map { ($0.fingerprint, $0) }, uniquingKeysWith: { first, _ in first })
        let reused = keys.map { key in known[key.fingerprint] ?? key }
        return JWKSet(keys: reused, skipped: skipped, built: built, refusals: refusals)
    }

    /// Whether `key` (this very object) is one of the set's keys.
    public func contains(_ key: VerificationKey) -> Bool {
        keys.contains { $0 === key }
    }

    /// Parses a JWKS document, `{"keys": [...]}`, taking from `previous` every key (and every refusal)
    /// of an entry it had, member for member.
    ///
    /// - Throws: `key_invalid` when the document is not JSON, has no `keys` array, or has more than
    ///   `maximumKeys` entries.
    public init(json bytes: [UInt8], reusing previous: JWKSet? = nil) throws(JOSEError) {
        let document: JSONValue
        do {
            document = try JSONValue.parse(ByteBuffer(bytes: bytes))
        } catch {
            throw .keyInvalid("key set is not valid JSON: \(error.message)")
        }
        guard case .array(let entries)? = document["keys"] else {
            throw .keyInvalid("key set has no \"keys\" array")
        }
        guard entries.count <= Self.maximumKeys else {
            throw .keyInvalid("key set has \(entries.count) entries, more than the \(Self.maximumKeys) keyholed examines")
        }
        var known = Dictionary((previous?.keys ?? []).map { ($0.fingerprint, $0) }, uniquingKeysWith: { first, _ in first })
        let knownRefusals = previous?.refusals ?? [:]
        var keys: [VerificationKey] = []
        var skipped: [String] = []
        var refusals: [[UInt8]: String] = [:]
        var built = 0
        for (index, entry) in entries.enumerated() {
            guard case .object(let jwk) = entry else {
                skipped.append("key \(index): not an object")
                continue
            }
            let fingerprint = VerificationKey.fingerprint(of: jwk)
            if let key = known[fingerprint] {
                keys.append(key)
                continue
            }
            let kid = jwk["kid"]?.stringValue.map { "kid \($0.prefix(64))" } ?? "key \(index)"
            let digest = SHA256.digest(fingerprint)
            if let digest, let reason = refusals[digest] ?? knownRefusals[digest] {
                refusals[digest] = reason
                skipped.append("\(kid): \(reason)")
                continue
            }
            built += 1
            do {
                let key = try VerificationKey(jwk: jwk, fingerprint: fingerprint)
                known[fingerprint] = key
                keys.append(key)
            } catch {
                if let digest { refusals[digest] = error.message }
                skipped.append("\(kid): \(error.message)")
            }
        }
        self.init(keys: keys, skipped: skipped, built: built, refusals: refusals)
    }
}
