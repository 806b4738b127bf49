internal import CKeyholeOpenSSL

/// Bytes from libcrypto's CSPRNG (`RAND_bytes`), for secrets such as session tokens.
public enum SecureRandom {
    /// `count` random bytes, or `nil` when the generator fails (never weaker bytes in their place).
    public static func bytes(_ count: Int) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: count)
        let ok = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) == 1 }
        return ok ? bytes : nil
    }

    /// 32 random bytes for a secret, or `nil` when the generator fails.
    public static func bytes32() -> [UInt8]? {
        withBytes32 { Array($0) }
    }

    /// Calls `body` with 32 random bytes from libcrypto's private generator (`RAND_priv_bytes`, the
    /// one OpenSSL keeps for secrets, apart from the public one whose output may be seen), drawn for
    /// this call alone; `nil` when the generator fails. The bytes live on the stack and are zeroed
    /// once `body` returns.
    ///
    /// Not from a block drawn ahead: that saved about a microsecond a session, but kept the next
    /// tokens' bytes in memory before they existed, where a core dump or a memory disclosure would
    /// give them away, and a forked child would hand out the same ones.
    public static func withBytes32<Result>(_ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result? {
        var storage: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        return withUnsafeMutableBytes(of: &storage) { raw -> Result? in
            let buffer = raw.bindMemory(to: UInt8.self)
            // OPENSSL_cleanse: a zeroing the optimiser may not remove.
            defer { OPENSSL_cleanse(raw.baseAddress, raw.count) }
            guard RAND_priv_bytes(buffer.baseAddress, Int32(buffer.count)) == 1 else { return nil }
            return body(UnsafeBufferPointer(buffer))
        }
    }
}

