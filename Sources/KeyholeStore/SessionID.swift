import KeyholeJOSE

/// A session's id: the first 16 bytes of SHA-256 of its token (WALRecordTypes.md). Not a secret: it
/// names a session in lists and logs, and knowing it does not help find the token.
public struct SessionID: Hashable, Sendable, CustomStringConvertible {
    /// The 16 bytes as two big-endian words.
    public let high: UInt64
    /// The second word.
    public let low: UInt64

    /// An id from its two words.
    public init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// An id from its 16 bytes; `nil` for any other length.
    public init?(bytes: some Collection<UInt8>) {
        guard bytes.count == 16 else { return nil }
        let array = Array(bytes)
        self.init(high: array.bigEndianUInt64(at: 0), low: array.bigEndianUInt64(at: 8))
    }

    /// An id from its text form (22 characters of base64url); `nil` for anything else.
    public init?(text: some StringProtocol) {
        guard text.utf8.count == 22, let bytes = Base64URL.decode(text) else { return nil }
        self.init(bytes: bytes)
    }

    /// The 16 bytes.
    public var bytes: [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(16)
        bytes.appendBigEndian(high)
        bytes.appendBigEndian(low)
        return bytes
    }

    /// The text form: base64url without padding, 22 characters.
    public var description: String { withText { String(decoding: $0, as: UTF8.self) } }

    /// Calls `body` with the text form's UTF-8, kept on the stack: answers write it without a `String`.
    public func withText<Result>(_ body: (UnsafeBufferPointer<UInt8>) -> Result) -> Result {
        withUnsafeBytes(of: (high.bigEndian, low.bigEndian)) { bytes in
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 22) { text in
                let count = Base64URL.encode(bytes, into: text)
                return body(UnsafeBufferPointer(rebasing: text[..<count]))
            }
        }
    }

    /// Spreads ids over the table: they are uniformly distributed already.
    public func hash(into hasher: inout Hasher) { hasher.combine(high) }
}

/// The second half of a token's SHA-256, compared in constant time when the token is presented.
struct SessionCheck: Sendable {
    let high: UInt64
    let low: UInt64

    init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// Equality without an early exit, so response time says nothing about how much matched.
    func matches(_ other: SessionCheck) -> Bool {
        ((high ^ other.high) | (low ^ other.low)) == 0
    }
}
