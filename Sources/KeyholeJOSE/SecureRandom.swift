internal import CKeyholeOpenSSL
import Synchronization

/// Bytes from libcrypto's CSPRNG (`RAND_bytes`), for secrets such as session tokens.
public enum SecureRandom {
    /// `count` random bytes, or `nil` when the generator fails (never weaker bytes in their place).
    public static func bytes(_ count: Int) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: count)
        let ok = bytes.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) == 1 }
        return ok ? bytes : nil
    }

    /// 32 random bytes, or `nil` when the generator fails, taken from a block drawn ahead: one
    /// `RAND_bytes` call costs about a microsecond whatever its size (locking, the fork check, a
    /// reseed check), which a session create would otherwise pay each time.
    ///
    /// Bytes handed out are zeroed in the block, so it never holds randomness already in use. The
    /// block is per process: keyholed never forks (a child would hand out the same bytes).
    public static func bytes32() -> [UInt8]? {
        pool.withLock { $0.take32() }
    }

    private static let pool = Mutex(Pool())

    private struct Pool: ~Copyable {
        static let blockBytes = 4096
        var block = [UInt8](repeating: 0, count: Pool.blockBytes)
        var position = Pool.blockBytes

        mutating func take32() -> [UInt8]? {
            if position + 32 > block.count {
                let ok = block.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32($0.count)) == 1 }
                guard ok else { return nil }
                position = 0
            }
            let bytes = Array(block[position..<(position + 32)])
            for index in position..<(position + 32) { block[index] = 0 }
            position += 32
            return bytes
        }
    }
}
