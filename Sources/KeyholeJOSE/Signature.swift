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
        var pkeyContext: OpaquePointer?
        guard EVP_DigestVerifyInit(context, &pkeyContext, digest(for: algorithm), nil, pkey) == 1 else { return false }
        switch algorithm {
        case .rs256, .rs384, .rs512:
            guard EVP_PKEY_CTX_set_rsa_padding(pkeyContext, ckeyhole_rsa_pkcs1_padding()) == 1 else { return false }
        case .ps256, .ps384, .ps512:
            // RFC 7518 3.5: MGF1 with the same hash, salt as long as the hash.
            guard EVP_PKEY_CTX_set_rsa_padding(pkeyContext, ckeyhole_rsa_pkcs1_pss_padding()) == 1,
                EVP_PKEY_CTX_set_rsa_pss_saltlen(pkeyContext, ckeyhole_rsa_pss_saltlen_digest()) == 1,
                EVP_PKEY_CTX_set_rsa_mgf1_md(pkeyContext, digest(for: algorithm)) == 1
            else { return false }
        case .es256, .es384, .edDSA:
            break
        }
        return EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
    }

    /// The hash of each algorithm; EdDSA hashes internally and takes none.
    private static func digest(for algorithm: JWSAlgorithm) -> OpaquePointer? {
        switch algorithm {
        case .rs256, .ps256, .es256: EVP_sha256()
        case .rs384, .ps384, .es384: EVP_sha384()
        case .rs512, .ps512: EVP_sha512()
        case .edDSA: nil
        }
    }
}
