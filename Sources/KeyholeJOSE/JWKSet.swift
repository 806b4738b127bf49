import KeyholeProtocol
import NIOCore

/// An issuer's key set (RFC 7517 section 5), every usable key already made into a `VerificationKey`.
///
/// Keys keyholed cannot use (encryption keys, unsupported curves, short RSA keys) are skipped, not
/// fatal: issuers publish mixed sets, and one odd key must not stop the others from verifying.
public struct JWKSet: Sendable {
    /// The usable keys, in document order.
    public let keys: [VerificationKey]
    /// Why each unusable key was skipped, for `jwks.status` and logs.
    public let skipped: [String]

    /// The most keys taken from one document.
    public static let maximumKeys = 100

    /// A set of already-made keys.
    public init(keys: [VerificationKey]) {
        self.keys = keys
        self.skipped = []
    }

    private init(keys: [VerificationKey], skipped: [String]) {
        self.keys = keys
        self.skipped = skipped
    }

    /// This set with each key that `previous` also holds (same JWK, member for member) replaced by
    /// `previous`'s object for it: a refetch that changes nothing keeps every key's identity, so a
    /// cache of verified tokens, which remembers the key that verified each token, stays warm.
    public func reusingKeys(of previous: JWKSet?) -> JWKSet {
        guard let previous, !previous.keys.isEmpty else { return self }
        let reused = keys.map { key in previous.keys.first { $0.fingerprint == key.fingerprint } ?? key }
        return JWKSet(keys: reused, skipped: skipped)
    }

    /// Whether `key` (this very object) is one of the set's keys.
    public func contains(_ key: VerificationKey) -> Bool {
        keys.contains { $0 === key }
    }

    /// Parses a JWKS document, `{"keys": [...]}`.
    ///
    /// - Throws: `key_invalid` when the document is not JSON or has no `keys` array.
    public init(json bytes: [UInt8]) throws(JOSEError) {
        let document: JSONValue
        do {
            document = try JSONValue.parse(ByteBuffer(bytes: bytes))
        } catch {
            throw .keyInvalid("key set is not valid JSON: \(error.message)")
        }
        guard case .array(let entries)? = document["keys"] else {
            throw .keyInvalid("key set has no \"keys\" array")
        }
        var keys: [VerificationKey] = []
        var skipped: [String] = []
        for (index, entry) in entries.enumerated() {
            // Issuers publish a handful; a set of thousands is hostile or broken, and each key costs
            // an EVP_PKEY held in memory.
            guard keys.count < Self.maximumKeys else {
                skipped.append("keys after the first \(Self.maximumKeys) usable ones")
                break
            }
            guard case .object(let jwk) = entry else {
                skipped.append("key \(index): not an object")
                continue
            }
            do {
                keys.append(try VerificationKey(jwk: jwk))
            } catch {
                let kid = jwk["kid"]?.stringValue.map { "kid \($0.prefix(64))" } ?? "key \(index)"
                skipped.append("\(kid): \(error.message)")
            }
        }
        self.keys = keys
        self.skipped = skipped
    }
}
