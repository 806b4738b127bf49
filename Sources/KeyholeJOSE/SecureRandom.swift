internal import CKeyholeOpenSSL

/// Bytes from libcrypto's CSPRNG (`RAND_bytes`), for secrets such as session tokens.
public enum SecureRandom {
    /// `count` random bytes, or `nil` when the generator fails (never weaker bytes in their place).
    public static func bytes(_ count: Int) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: count)
        let ok = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) == 1 }
        return ok ? bytes : nil
    }
}
