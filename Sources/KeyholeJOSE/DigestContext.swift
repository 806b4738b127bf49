internal import CKeyholeOpenSSL

#if canImport(Glibc)
import Glibc
#endif

/// One SHA-256 digest context per thread, made on the thread's first digest and freed when the
/// thread ends.
///
/// `EVP_Digest` makes and frees a context and its provider state on every call: two allocations
/// for each session lookup and cached token check, which hash their token. A context reset by
/// `EVP_DigestInit_ex2` for the same algorithm keeps its provider state, so a thread reusing its own
/// allocates nothing. Per thread, because a context holds one digest in progress; a pthread key
/// rather than a pool, because a lookup must not take a lock.
enum DigestContext {
    /// The key, made once; its destructor frees a thread's context when the thread exits (dispatch's
    /// worker threads come and go).
    private static let key: pthread_key_t? = {
        var key = pthread_key_t()
        let made = pthread_key_create(&key) { context in
            if let context { EVP_MD_CTX_free(OpaquePointer(context)) }
        }
        return made == 0 ? key : nil
    }()

    /// This thread's context, or `nil` when one cannot be made (the caller then digests without).
    static func current() -> OpaquePointer? {
        guard let key else { return nil }
        if let context = pthread_getspecific(key) { return OpaquePointer(context) }
        guard let context = EVP_MD_CTX_new() else { return nil }
        guard pthread_setspecific(key, UnsafeRawPointer(context)) == 0 else {
            EVP_MD_CTX_free(context)
            return nil
        }
        return context
    }

    /// SHA-256 of `bytes` into `out` (32 bytes) with `algorithm`; false if libcrypto fails.
    static func sha256(_ bytes: UnsafeRawBufferPointer, into out: UnsafeMutableRawPointer, algorithm: OpaquePointer) -> Bool {
        var length: UInt32 = 0
        guard let context = current() else {
            return EVP_Digest(bytes.baseAddress, bytes.count, out, &length, algorithm, nil) == 1 && length == 32
        }
        return EVP_DigestInit_ex2(context, algorithm, nil) == 1
            && EVP_DigestUpdate(context, bytes.baseAddress, bytes.count) == 1
            && EVP_DigestFinal_ex(context, out, &length) == 1 && length == 32
    }
}
