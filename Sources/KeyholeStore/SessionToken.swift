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
        // Without a branch per byte: random base64url letters defeat a branch predictor.
        var outside: UInt8 = 0
        for index in 3..<length {
            outside |= Self.outsideAlphabet(bytes[index])
        }
        return outside == 0
    }

    /// 0 for a byte of the base64url alphabet, else 1 (as `Base64URL.isAlphabet`, branch-free).
    @inline(__always)
    private static func outsideAlphabet(_ byte: UInt8) -> UInt8 {
        let letter = (byte | 0x20) &- UInt8(ascii: "a") < 26
        let digit = byte &- UInt8(ascii: "0") < 10
        let mark = (byte == UInt8(ascii: "-")) != (byte == UInt8(ascii: "_"))
        return (letter || digit || mark) ? 0 : 1
    }
}
