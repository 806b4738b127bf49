internal import CKeyholeOpenSSL
import KeyholeProtocol

/// An EC P-256 private key that signs ES256 JWS, such as the `.p8` key Apple issues for Sign in with
/// Apple client secrets (PKCS#8, PEM).
///
/// The key is parsed into an OpenSSL `EVP_PKEY` once; its material never leaves libcrypto except
/// through `pkcs8PEM()`, which tests use to write key files. `description` names the curve and
/// nothing else, so logging a key never logs it.
public final class SigningKey: Sendable, CustomStringConvertible {
    /// Immutable after init; OpenSSL allows concurrent signatures with one key and separate contexts.
    nonisolated(unsafe) private let pkey: OpaquePointer

    /// The key in a PEM file: PKCS#8 (`BEGIN PRIVATE KEY`, as Apple's `.p8` files are) or SEC 1
    /// (`BEGIN EC PRIVATE KEY`), unencrypted, on curve P-256.
    ///
    /// - Throws: `key_invalid` for anything else, without quoting the file.
    public init(pem: [UInt8]) throws(JOSEError) {
        guard !pem.isEmpty, pem.count < 64 * 1024 else { throw .keyInvalid("not a PEM private key") }
        defer { ERR_clear_error() }
        let parsed: OpaquePointer? = pem.withUnsafeBytes { bytes in
            guard let bio = BIO_new_mem_buf(bytes.baseAddress, Int32(bytes.count)) else { return nil }
            defer { BIO_free(bio) }
            // No password callback: an encrypted key fails instead of prompting on a terminal.
            return PEM_read_bio_PrivateKey(bio, nil, { _, _, _, _ in -1 }, nil)
        }
        guard let parsed else { throw .keyInvalid("not an unencrypted PEM private key") }
        guard Self.isP256(parsed) else {
            EVP_PKEY_free(parsed)
            throw .keyInvalid("the private key is not an EC key on P-256 (ES256)")
        }
        // A file whose public point does not belong to its private scalar would publish a JWK that
        // verifies none of the signatures made.
        guard Self.isPairConsistent(parsed) else {
            EVP_PKEY_free(parsed)
            throw .keyInvalid("the private key's public point does not match it")
        }
        pkey = parsed
    }

    /// A new random key, for tests and fake servers.
    public init() {
        guard let generated = ckeyhole_ec_p256_generate() else { fatalError("libcrypto could not generate a P-256 key") }
        pkey = generated
    }

    deinit { EVP_PKEY_free(pkey) }

    /// Names the curve only.
    public var description: String { "EC P-256 private key" }

    private static func isP256(_ pkey: OpaquePointer) -> Bool {
        guard EVP_PKEY_is_a(pkey, "EC") == 1 else { return false }
        var name = [CChar](repeating: 0, count: 64)
        var length = 0
        guard EVP_PKEY_get_utf8_string_param(pkey, "group", &name, name.count, &length) == 1 else { return false }
        let group = String(decoding: name[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return group == "prime256v1" || group == "P-256"
    }

    private static func isPairConsistent(_ pkey: OpaquePointer) -> Bool {
        guard let context = EVP_PKEY_CTX_new_from_pkey(nil, pkey, nil) else { return false }
        defer { EVP_PKEY_CTX_free(context) }
        return EVP_PKEY_pairwise_check(context) == 1
    }

    /// The ES256 signature of `message`: SHA-256, ECDSA, as raw r‖s (64 bytes, RFC 7518 3.4).
    ///
    /// - Throws: `key_invalid` if libcrypto fails, which a valid key never makes it do.
    public func sign(_ message: [UInt8]) throws(JOSEError) -> [UInt8] {
        guard let context = EVP_MD_CTX_new() else { throw .keyInvalid("out of memory") }
        defer {
            EVP_MD_CTX_free(context)
            ERR_clear_error()
        }
        guard EVP_DigestSignInit(context, nil, EVP_sha256(), nil, pkey) == 1 else { throw .keyInvalid("cannot sign with the key") }
        var length = 0
        guard EVP_DigestSign(context, nil, &length, message, message.count) == 1 else { throw .keyInvalid("cannot sign") }
        var der = [UInt8](repeating: 0, count: length)
        guard EVP_DigestSign(context, &der, &length, message, message.count) == 1 else { throw .keyInvalid("cannot sign") }
        guard let raw = Self.rawSignature(der: Array(der[..<length]), width: 32) else { throw .keyInvalid("bad signature encoding") }
        return raw
    }

    /// DER `ECDSA-Sig-Value` as r‖s of `width` bytes each.
    private static func rawSignature(der: [UInt8], width: Int) -> [UInt8]? {
        let sig: OpaquePointer? = der.withUnsafeBufferPointer { buffer in
            var pointer: UnsafePointer<UInt8>? = buffer.baseAddress
            return d2i_ECDSA_SIG(nil, &pointer, buffer.count)
        }
        guard let sig else { return nil }
        defer { ECDSA_SIG_free(sig) }
        var raw = [UInt8](repeating: 0, count: 2 * width)
        let ok = raw.withUnsafeMutableBufferPointer { out in
            BN_bn2binpad(ECDSA_SIG_get0_r(sig), out.baseAddress, Int32(width)) == Int32(width)
                && BN_bn2binpad(ECDSA_SIG_get0_s(sig), out.baseAddress! + width, Int32(width)) == Int32(width)
        }
        return ok ? raw : nil
    }

    /// The public key as a JWK (`kty` EC, `crv` P-256, `x`, `y`), with `kid` and `alg` when given.
    public func publicJWK(kid: String? = nil, alg: JWSAlgorithm? = .es256) -> [String: JSONValue] {
        var point = [UInt8](repeating: 0, count: 65)
        var length = 0
        let ok = EVP_PKEY_get_octet_string_param(pkey, "encoded-pub-key", &point, point.count, &length) == 1
        precondition(ok && length == 65 && point[0] == 0x04, "a P-256 key has an uncompressed 65-byte point")
        var jwk: [String: JSONValue] = [
            "kty": .string("EC"), "crv": .string("P-256"), "use": .string("sig"),
            "x": .string(Base64URL.encode(point[1...32])), "y": .string(Base64URL.encode(point[33...64])),
        ]
        if let kid { jwk["kid"] = .string(kid) }
        if let alg { jwk["alg"] = .string(alg.rawValue) }
        return jwk
    }

    /// The private key as PKCS#8 PEM, as Apple's `.p8` files hold it: for tests that write key files
    /// (package-only: keyholed itself never exports a key).
    package func pkcs8PEM() -> [UInt8] {
        guard let bio = BIO_new(BIO_s_mem()) else { fatalError("out of memory") }
        defer { BIO_free(bio) }
        guard PEM_write_bio_PrivateKey(bio, pkey, nil, nil, 0, nil, nil) == 1 else { fatalError("cannot write the key") }
        var data: UnsafeMutablePointer<CChar>?
        let count = ckeyhole_bio_get_mem_data(bio, &data)
        guard count > 0, let data else { return [] }
        return Array(UnsafeRawBufferPointer(start: data, count: count))
    }

    /// A compact JWS (a signed JWT) of `claims`, with header `alg` ES256, `kid` when given, `typ` when
    /// given. Members are written sorted, so the same input gives the same signing input.
    public func signJWT(claims: [String: JSONValue], kid: String?, type: String? = nil) throws(JOSEError) -> String {
        var header: [String: JSONValue] = ["alg": .string(JWSAlgorithm.es256.rawValue)]
        if let kid { header["kid"] = .string(kid) }
        if let type { header["typ"] = .string(type) }
        let signingInput = Base64URL.encode(Array(JSONValue.object(header).jsonText.utf8)) + "."
            + Base64URL.encode(Array(JSONValue.object(claims).jsonText.utf8))
        let signature = try sign(Array(signingInput.utf8))
        return signingInput + "." + Base64URL.encode(signature)
    }
}
