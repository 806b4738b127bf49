internal import CKeyholeOpenSSL
import KeyholeProtocol
import NIOCore

/// A public key from a JWK, made into an OpenSSL `EVP_PKEY` once, when its key set is loaded, so that
/// verifying a token never parses key material.
///
/// Supported: RSA of 2048 to 8192 bits (RS256/384/512, PS256/384/512), EC P-256 (ES256) and P-384
/// (ES384), OKP Ed25519 (EdDSA). The JWK's `alg`, `use` and `key_ops` limit what the key may verify.
public final class VerificationKey: Sendable, CustomStringConvertible {
    /// The kinds of key, with what decides which algorithms fit.
    enum Kind: Sendable, Equatable {
        case rsa(bits: Int)
        case ecP256
        case ecP384
        case ed25519
    }

    /// The JWK's `kid`.
    public let kid: String?
    /// The JWK's `alg`, when it names an algorithm keyholed knows.
    public let algorithm: JWSAlgorithm?
    /// The JWK's `alg` as given: a key whose `alg` is anything else (HS256, RSA-OAEP) permits nothing.
    let declaredAlgorithm: String?
    let kind: Kind
    let use: String?
    let keyOperations: [String]?
    /// The JWK as loaded, serialised with its members sorted, so that a refetched key set keeps the key
    /// objects of unchanged keys (see `JWKSet.reusingKeys(of:)`). The bytes themselves, not a hash:
    /// equal fingerprints mean equal JWKs, whatever happens in libcrypto.
    public let fingerprint: [UInt8]
    /// Immutable after init; OpenSSL allows concurrent verifications with one key and separate contexts.
    nonisolated(unsafe) private let pkey: OpaquePointer
    /// A verification context per algorithm this key permits, made once here so that a check copies one
    /// instead of setting one up (see `Signature`). Only ever read; freed with the key.
    nonisolated(unsafe) private let prepared: [(algorithm: JWSAlgorithm, context: OpaquePointer)]

    /// The smallest RSA modulus accepted.
    public static let minimumRSABits = 2048
    /// The largest RSA modulus accepted (issue 26, finding 5): no issuer signs with more, and making
    /// and checking a key, and each signature check, grow with its size.
    public static let maximumRSABits = 8192

    /// Makes a key from a JWK object. Private members (`d`, `p`, ...) are ignored.
    ///
    /// - Throws: `key_invalid` for an unsupported type or curve, a short or malformed key, a point not on
    ///   its curve, or members of the wrong type.
    public convenience init(jwk: [String: JSONValue]) throws(JOSEError) {
        try self.init(jwk: jwk, fingerprint: Self.fingerprint(of: jwk))
    }

    /// The JWK serialised with its members sorted: what `fingerprint` holds.
    static func fingerprint(of jwk: [String: JSONValue]) -> [UInt8] {
        var canonical = ByteBuffer()
        JSONValue.object(jwk).write(to: &canonical)
        return Array(canonical.readableBytesView)
    }

    /// Makes a key from a JWK whose `fingerprint(of:)` the caller already has.
    init(jwk: [String: JSONValue], fingerprint: [UInt8]) throws(JOSEError) {
        self.fingerprint = fingerprint
        kid = try Self.optionalString(jwk, "kid")
        declaredAlgorithm = try Self.optionalString(jwk, "alg")
        algorithm = declaredAlgorithm.flatMap(JWSAlgorithm.init(rawValue:))
        use = try Self.optionalString(jwk, "use")
        switch jwk["key_ops"] {
        case nil:
            keyOperations = nil
        case .array(let operations)?:
            keyOperations = try operations.map { operation throws(JOSEError) in
                guard case .string(let name) = operation else { throw .keyInvalid("key_ops must hold strings") }
                return name
            }
        default:
            throw .keyInvalid("key_ops must be an array")
        }
        switch try Self.optionalString(jwk, "kty") {
        case "RSA":
            let n = Self.strippingLeadingZeros(try Self.bytes(jwk, "n"))
            let e = Self.strippingLeadingZeros(try Self.bytes(jwk, "e"))
            (pkey, kind) = try Self.rsaKey(modulus: n, exponent: e)
        case "EC":
            (pkey, kind) = try Self.ecKey(curve: try Self.optionalString(jwk, "crv"), x: try Self.bytes(jwk, "x"), y: try Self.bytes(jwk, "y"))
        case "OKP":
            guard try Self.optionalString(jwk, "crv") == "Ed25519" else { throw .keyInvalid("OKP keys must be Ed25519") }
            let x = try Self.bytes(jwk, "x")
            guard x.count == 32, let key = EVP_PKEY_new_raw_public_key(EVP_PKEY_ED25519, nil, x, x.count) else {
                throw .keyInvalid("an Ed25519 key is 32 bytes")
            }
            (pkey, kind) = (key, .ed25519)
        case let other:
            throw .keyInvalid("unsupported key type \(other.map { "'\($0.prefix(16))'" } ?? "(none)")")
        }
        prepared = JWSAlgorithm.allCases.compactMap { [pkey, kind, declaredAlgorithm, use, keyOperations] algorithm in
            guard Self.permits(algorithm, kind: kind, declaredAlgorithm: declaredAlgorithm, use: use, keyOperations: keyOperations),
                let context = Signature.prepare(pkey: pkey, algorithm: algorithm)
            else { return nil }
            return (algorithm, context)
        }
    }

    deinit {
        for entry in prepared { EVP_PKEY_CTX_free(entry.context) }
        EVP_PKEY_free(pkey)
    }

    /// The algorithms this key checks on a prepared context (the rest take the one-shot path).
    var preparedAlgorithms: [JWSAlgorithm] { prepared.map(\.algorithm) }

    /// `RSA-2048 kid=...` and the like, for logs: never key material.
    public var description: String {
        let type = switch kind {
        case .rsa(let bits): "RSA-\(bits)"
        case .ecP256: "EC P-256"
        case .ecP384: "EC P-384"
        case .ed25519: "Ed25519"
        }
        return "\(type) kid=\(kid ?? "(none)")"
    }

    /// Whether this key may verify a signature made with `algorithm`: the key type and curve fit, and
    /// the JWK's `alg`, `use` ("sig") and `key_ops` ("verify") allow it.
    public func permits(_ algorithm: JWSAlgorithm) -> Bool {
        Self.permits(algorithm, kind: kind, declaredAlgorithm: declaredAlgorithm, use: use, keyOperations: keyOperations)
    }

    private static func permits(
        _ algorithm: JWSAlgorithm, kind: Kind, declaredAlgorithm: String?, use: String?, keyOperations: [String]?
    ) -> Bool {
        guard fits(algorithm, kind: kind) else { return false }
        if let declaredAlgorithm, declaredAlgorithm != algorithm.rawValue { return false }
        if let use, use != "sig" { return false }
        if let keyOperations, !keyOperations.contains("verify") { return false }
        return true
    }

    private static func fits(_ algorithm: JWSAlgorithm, kind: Kind) -> Bool {
        switch (kind, algorithm) {
        case (.rsa, .rs256), (.rsa, .rs384), (.rsa, .rs512), (.rsa, .ps256), (.rsa, .ps384), (.rsa, .ps512): true
        case (.ecP256, .es256), (.ecP384, .es384), (.ed25519, .edDSA): true
        default: false
        }
    }

    /// Verifies `signature`, as it appears in a JWS (raw r‖s for ECDSA), over `message` with `algorithm`.
    /// Returns `false` for any failure, including an algorithm this key does not permit.
    public func verify(signature: [UInt8], message: [UInt8], algorithm: JWSAlgorithm) -> Bool {
        guard permits(algorithm) else { return false }
        var signature = signature
        switch algorithm {
        case .es256, .es384:
            // JWS carries r‖s of fixed width (RFC 7518 3.4); OpenSSL wants DER. Other lengths are forged.
            guard let der = Self.derSignature(rawRS: signature, width: algorithm == .es256 ? 32 : 48) else { return false }
            signature = der
        case .rs256, .rs384, .rs512, .ps256, .ps384, .ps512:
            // RFC 8017 8.1.2 and 8.2.2: a signature is exactly k bytes, k the modulus's length. OpenSSL's
            // PSS check strips leading zero bytes before it compares, so without this one signature
            // would have two spellings (two token strings) whenever it begins with a zero byte.
            guard case .rsa(let bits) = kind, signature.count == (bits + 7) / 8 else { return false }
        case .edDSA:
            break
        }
        for entry in prepared where entry.algorithm == algorithm {
            return Signature.verify(prepared: entry.context, algorithm: algorithm, signature: signature, message: message)
        }
        return Signature.verify(pkey: pkey, algorithm: algorithm, signature: signature, message: message)
    }
}
