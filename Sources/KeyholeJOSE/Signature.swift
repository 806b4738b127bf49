internal import CKeyholeOpenSSL

/// One signature check through libcrypto's EVP API.
enum Signature {
    static func verify(pkey: OpaquePointer, algorithm: JWSAlgorithm, signature: [UInt8], message: [UInt8]) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer {
            EVP_MD_CTX_free(context)
            // Failed checks leave entries on the thread's error queue; it must not grow.
            ERR_clear_error()
        }
        // Copying a context prepared per key at load (EVP_MD_CTX_copy_ex) was measured slower than this
        // initialisation, so every verification initialises its own.
        guard initialise(context, pkey: pkey, algorithm: algorithm) else { return false }
        return EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
    }

    private static func initialise(_ context: OpaquePointer, pkey: OpaquePointer, algorithm: JWSAlgorithm) -> Bool {
        var pkeyContext: OpaquePointer?
        guard EVP_DigestVerifyInit(context, &pkeyContext, digest(for: algorithm), nil, pkey) == 1 else { return false }
        switch algorithm {
        case .rs256, .rs384, .rs512:
            return EVP_PKEY_CTX_set_rsa_padding(pkeyContext, ckeyhole_rsa_pkcs1_padding()) == 1
        case .ps256, .ps384, .ps512:
            // RFC 7518 3.5: MGF1 with the same hash, salt as long as the hash.
            return EVP_PKEY_CTX_set_rsa_padding(pkeyContext, ckeyhole_rsa_pkcs1_pss_padding()) == 1
                && EVP_PKEY_CTX_set_rsa_pss_saltlen(pkeyContext, ckeyhole_rsa_pss_saltlen_digest()) == 1
                && EVP_PKEY_CTX_set_rsa_mgf1_md(pkeyContext, digest(for: algorithm)) == 1
        case .es256, .es384, .edDSA:
            return true
        }
    }

    /// Digests fetched from the provider once: the legacy `EVP_sha256()` handles make OpenSSL 3 fetch
    /// the implementation again on every verification. Never freed; they live as long as the process.
    nonisolated(unsafe) private static let sha256 = EVP_MD_fetch(nil, "SHA2-256", nil)
    nonisolated(unsafe) private static let sha384 = EVP_MD_fetch(nil, "SHA2-384", nil)
    nonisolated(unsafe) private static let sha512 = EVP_MD_fetch(nil, "SHA2-512", nil)

    /// The hash of each algorithm; EdDSA hashes internally and takes none.
    private static func digest(for algorithm: JWSAlgorithm) -> OpaquePointer? {
        switch algorithm {
        case .rs256, .ps256, .es256: sha256
        case .rs384, .ps384, .es384: sha384
        case .rs512, .ps512: sha512
        case .edDSA: nil
        }
    }
}
