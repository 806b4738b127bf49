import KeyholeJOSE

/// Session tokens: `kh_` followed by the base64url of 32 bytes from the CSPRNG (46 characters).
///
/// keyholed hands a token out once, when the session is created, and keeps only its SHA-256.
public enum SessionToken {
    /// The prefix every token has, so that a leaked one is easy to recognise in logs and code.
    public static let prefix = prefixLiteral.description
    /// The prefix as a literal, which `Base64URL.encode(_:prefix:)` writes without a `String`.
    static let prefixLiteral: StaticString = "kh_"
    /// The length of a token's text.
    public static var length: Int { 46 }

    /// A new token, its id and its check; `nil` when the random generator or SHA-256 fails.
    package static func generate() -> (token: String, id: SessionID, check: SessionCheck)? {
        guard let token = SecureRandom.withBytes32({ Base64URL.encode($0, prefix: prefixLiteral) }) else { return nil }
        var text = token
        guard let (id, check) = text.withUTF8({ digest(wellFormed: UnsafeRawBufferPointer($0)) }) else { return nil }
        return (token, id, check)
    }

    /// The id and check of `token`, or `nil` when it does not have a token's form.
    package static func digest(_ token: String) -> (SessionID, SessionCheck)? {
        var token = token
        return token.withUTF8 { digest(bytes: UnsafeRawBufferPointer($0)) }
    }

    /// `digest` of a token's UTF-8 bytes, read where they lie (a request's frame).
    package static func digest(bytes token: UnsafeRawBufferPointer) -> (SessionID, SessionCheck)? {
        guard isWellFormed(token.assumingMemoryBound(to: UInt8.self)) else { return nil }
        return digest(wellFormed: token)
    }

    /// `digest` of a token known to have a token's form (one just made).
    private static func digest(wellFormed token: UnsafeRawBufferPointer) -> (SessionID, SessionCheck)? {
        guard let digest = SHA256.digest(bytes: token) else { return nil }
        // Digest words are in memory order; the id is defined over the bytes, so read them big-endian.
        let words = digest.words
        return (
            SessionID(high: UInt64(bigEndian: words.0), low: UInt64(bigEndian: words.1)),
            SessionCheck(high: UInt64(bigEndian: words.2), low: UInt64(bigEndian: words.3))
        )
    }

    /// Whether `text` has the form of a token (it may still name no session).
    public static func isWellFormed(_ text: String) -> Bool {
        var text = text
        return text.withUTF8 { isWellFormed($0) }
    }

    /// Whether `bytes` have the form of a token.
    static func isWellFormed(_ bytes: UnsafeBufferPointer<UInt8>) -> Bool {
        // Byte comparisons against literals: `hasPrefix` compares by Unicode rules, which a fixed ASCII
        // prefix does not need, and `prefix` is a global, checked for initialisation on each use.
        guard bytes.count == length, bytes[0] == UInt8(ascii: "k"), bytes[1] == UInt8(ascii: "h"), bytes[2] == UInt8(ascii: "_")
        else { return false }
        // Eight letters at a time, without a branch per byte (random letters defeat a branch
        // predictor): words at 3, 11, ..., 35, and the last eight bytes (overlapping the one before).
        let raw = UnsafeRawPointer(bytes.baseAddress!)
        var outside: UInt64 = 0
        for offset in stride(from: 3, to: length - 8, by: 8) {
            outside |= Self.outsideAlphabet(raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self))
        }
        outside |= Self.outsideAlphabet(raw.loadUnaligned(fromByteOffset: length - 8, as: UInt64.self))
        return outside == 0
    }

    /// Zero when all eight bytes of `word` are of the base64url alphabet (`Base64URL.isAlphabet`),
    /// else not: each byte's test is exact, since no sum below carries out of its byte.
    @inline(__always)
    static func outsideAlphabet(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs = ones &* 0x80
        // Every test below is on 7-bit bytes; a byte with its high bit set is outside in any case.
        let low = word & ~highs
        /// The high bit of each byte that is at least `bound` (a byte plus 0x80 - bound, at most 0xFF).
        func atLeast(_ value: UInt64, _ bound: UInt64) -> UInt64 { (value &+ ones &* (0x80 &- bound)) & highs }
        /// The high bit of each byte that is at most `bound` (a byte plus 0x7F - bound sets it otherwise).
        func atMost(_ value: UInt64, _ bound: UInt64) -> UInt64 { ~(value &+ ones &* (0x7F &- bound)) & highs }
        let folded = low | ones &* 0x20  // 'A'...'Z' onto 'a'...'z'; nothing else lands there
        let letter = atLeast(folded, 0x61) & atMost(folded, 0x7A)
        let digit = atLeast(low, 0x30) & atMost(low, 0x39)
        let dash = atMost(low ^ ones &* 0x2D, 0)
        let underscore = atMost(low ^ ones &* 0x5F, 0)
        return (word & highs) | ((letter | digit | dash | underscore) ^ highs)
    }
}
