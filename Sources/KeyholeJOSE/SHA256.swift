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
    }

    /// Fetched once: `EVP_sha256()` would look the implementation up again on every call.
    nonisolated(unsafe) private static let algorithm = EVP_MD_fetch(nil, "SHA2-256", nil)

    /// The 32-byte digest of `bytes`, or `nil` if libcrypto fails (never a made-up value: a digest of
    /// zeros would make every input look alike).
    public static func digest(_ bytes: some Collection<UInt8>) -> [UInt8]? {
        guard let algorithm else { return nil }
        var output = [UInt8](repeating: 0, count: 32)
        let input = Array(bytes)
        let ok = output.withUnsafeMutableBytes { out in
            input.withUnsafeBytes { DigestContext.sha256($0, into: out.baseAddress!, algorithm: algorithm) }
        }
        return ok ? output : nil
    }

    /// The digest of `text`'s UTF-8 bytes, without copying them; `nil` if libcrypto fails.
    public static func digest(utf8 text: String) -> Digest? {
        guard let algorithm else { return nil }
        var text = text
        var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)
        let ok = text.withUTF8 { bytes in
            withUnsafeMutableBytes(of: &words) { out in
                DigestContext.sha256(UnsafeRawBufferPointer(bytes), into: out.baseAddress!, algorithm: algorithm)
            }
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
