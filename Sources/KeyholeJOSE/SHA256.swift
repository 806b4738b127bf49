internal import CKeyholeOpenSSL

/// SHA-256 through libcrypto.
public enum SHA256 {
    /// A digest as four words: hashed and compared without an allocation, as a cache key must be.
    public struct Digest: Hashable, Sendable {
        /// The 32 bytes, in memory order.
        public let words: (UInt64, UInt64, UInt64, UInt64)

        /// Equal digests hash alike; the first word is already uniformly distributed.
        public func hash(into hasher: inout Hasher) { hasher.combine(words.0) }

        /// Compares all 32 bytes.
        public static func == (lhs: Digest, rhs: Digest) -> Bool {
            lhs.words.0 == rhs.words.0 && lhs.words.1 == rhs.words.1 && lhs.words.2 == rhs.words.2
                && lhs.words.3 == rhs.words.3
        }
        /// The digest whose 32 bytes these are (as stored); `nil` for any other length.
        public init?(bytes: some Collection<UInt8>) {
            guard bytes.count == 32 else { return nil }
            var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
            withUnsafeMutableBytes(of: &words) { $0.copyBytes(from: bytes) }
            self.words = words
        }

        fileprivate init(words: (UInt64, UInt64, UInt64, UInt64)) {
            self.words = words
        }

        /// The 32 bytes, in memory order (to be stored).
        public var bytes: [UInt8] { withUnsafeBytes(of: words) { Array($0) } }
    }


    /// The 32-byte digest of `bytes`, or `nil` if libcrypto fails (never a made-up value: a digest of
    /// zeros would make every input look alike).
    public static func digest(_ bytes: some Collection<UInt8>) -> [UInt8]? {
        var output = [UInt8](repeating: 0, count: 32)
        let input = Array(bytes)
        let ok = output.withUnsafeMutableBytes { out in
            input.withUnsafeBytes { ckeyhole_sha256($0.baseAddress, $0.count, out.baseAddress!.assumingMemoryBound(to: UInt8.self)) == 1 }
        }
        return ok ? output : nil
    }

    /// The digest of `text`'s UTF-8 bytes, without copying them; `nil` if libcrypto fails.
    public static func digest(utf8 text: String) -> Digest? {
        var text = text
        return text.withUTF8 { digest(bytes: UnsafeRawBufferPointer($0)) }
    }

    /// The digest of `bytes`, without copying them and without allocating (libcrypto's SHA256 on a
    /// context on the stack: EVP would allocate a provider context for every digest); `nil` if
    /// libcrypto fails.
    public static func digest(bytes: UnsafeRawBufferPointer) -> Digest? {
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        let ok = withUnsafeMutableBytes(of: &words) { out in
            ckeyhole_sha256(bytes.baseAddress, bytes.count, out.baseAddress!.assumingMemoryBound(to: UInt8.self)) == 1
        }
        return ok ? Digest(words: words) : nil
    }

    /// The digest as lowercase hex, as native Apple apps send a hashed nonce; `nil` if libcrypto fails.
    public static func hexDigest(_ bytes: some Collection<UInt8>) -> String? {
        guard let digest = digest(bytes) else { return nil }
        let digits = Array("0123456789abcdef".utf8)
        var text = [UInt8]()
        text.reserveCapacity(64)
        for byte in digest {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
