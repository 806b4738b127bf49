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
        withBytes32 { Array($0) }
    }

    /// Calls `body` with 32 random bytes drawn as `bytes32()` draws them, without copying them into
    /// an array; `nil` when the generator fails. The bytes are zeroed once `body` returns, and
    /// `body` runs under the block's lock, so it should only encode or hash them.
    public static func withBytes32<Result: Sendable>(_ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result? {
        pool.withLock { $0.take32(body) }
    }

    private static let pool = Mutex(Pool())

    private struct Pool: ~Copyable {
        static let blockBytes = 4096
        var block = [UInt8](repeating: 0, count: Pool.blockBytes)
        var position = Pool.blockBytes

        mutating func take32<Result>(_ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result? {
            let start = position
            return block.withUnsafeMutableBufferPointer { block -> Result? in
                var start = start
                if start + 32 > block.count {
                    guard RAND_bytes(block.baseAddress, Int32(block.count)) == 1 else { return nil }
                    start = 0
                }
                let bytes = UnsafeMutableBufferPointer(rebasing: block[start..<(start + 32)])
                defer {
                    bytes.update(repeating: 0)
                    position = start + 32
                }
                return body(UnsafeBufferPointer(bytes))
            }
        }
    }
}
