internal import CKeyholeOpenSSL

/// One signature check through libcrypto's EVP API.
///
/// Two paths. The usual one hashes the signing input itself and checks the signature over the digest
/// with `EVP_PKEY_verify`, on a copy of a context prepared once per key and algorithm (`prepare`).
/// Setting up a context from nothing costs OpenSSL 3 about 2.5 µs (provider lookups, parameter
/// plumbing), a sixth of an RSA-2048 check; a copy costs next to nothing (measured on this project's
/// 2-core machine: 16.0 µs per RS256 check with `EVP_DigestVerifyInit` each time, 13.1 µs with a
/// copied context, `openssl speed rsa2048` 12.5-13 µs). EdDSA signs the message itself, not a
/// digest, so it keeps the one-shot `EVP_DigestVerify`, as does any key whose context could not be made.
enum Signature {
    /// A verification context made ready for one key and algorithm (padding, digest), or `nil` when the
    /// algorithm cannot be checked over a digest (EdDSA) or libcrypto failed to make one. Free it with
    /// `EVP_PKEY_CTX_free`.
    static func prepare(pkey: OpaquePointer, algorithm: JWSAlgorithm) -> OpaquePointer? {
        // Whatever fails here leaves entries on the thread's error queue.
        defer { ERR_clear_error() }
        guard algorithm != .edDSA, let md = digest(for: algorithm),
            let context = EVP_PKEY_CTX_new_from_pkey(nil, pkey, nil)
        else { return nil }
        guard EVP_PKEY_verify_init(context) == 1, configure(context, algorithm: algorithm),
            EVP_PKEY_CTX_set_signature_md(context, md) == 1
        else {
            EVP_PKEY_CTX_free(context)
            return nil
        }
        return context
    }

    /// Checks `signature` (DER for ECDSA) over the digest of `message` with a copy of `prepared`.
    ///
    /// `prepared` is only read: `EVP_PKEY_CTX_dup` takes a const context and copies what the check
    /// changes, so event loops may check with one key at the same time, each on its own copy.
    static func verify(
        prepared: OpaquePointer, algorithm: JWSAlgorithm, signature: [UInt8], message: [UInt8]
    ) -> Bool {
        guard let md = digest(for: algorithm) else { return false }
        // 64 bytes hold the longest digest (SHA-512); nothing on the heap for it.
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { digestBuffer in
            var length: UInt32 = 0
            guard EVP_Digest(message, message.count, digestBuffer.baseAddress, &length, md, nil) == 1,
                let context = EVP_PKEY_CTX_dup(prepared)
            else {
                ERR_clear_error()
                return false
            }
            defer { EVP_PKEY_CTX_free(context) }
            let verified = EVP_PKEY_verify(context, signature, signature.count, digestBuffer.baseAddress, Int(length)) == 1
            // A failed check leaves entries on the thread's error queue; it must not grow.
            if !verified { ERR_clear_error() }
            return verified
        }
    }

    /// The one-shot path: a digest-and-verify context set up for this check alone.
    static func verify(pkey: OpaquePointer, algorithm: JWSAlgorithm, signature: [UInt8], message: [UInt8]) -> Bool {
        guard let context = EVP_MD_CTX_new() else { return false }
        defer {
            EVP_MD_CTX_free(context)
            ERR_clear_error()
        }
        var pkeyContext: OpaquePointer?
        guard EVP_DigestVerifyInit(context, &pkeyContext, digest(for: algorithm), nil, pkey) == 1,
            configure(pkeyContext, algorithm: algorithm)
        else { return false }
        return EVP_DigestVerify(context, signature, signature.count, message, message.count) == 1
    }

    /// The padding each algorithm's signatures use; ECDSA and EdDSA have none to set.
    private static func configure(_ pkeyContext: OpaquePointer?, algorithm: JWSAlgorithm) -> Bool {
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
