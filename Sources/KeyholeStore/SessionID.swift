import KeyholeJOSE
import KeyholeProtocol

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
        var text: (UInt64, UInt64, UInt64) = (0, 0, 0)
        return withUnsafeMutableBytes(of: &text) { bytes in
            let start = bytes.baseAddress!.assumingMemoryBound(to: UInt8.self)
            encodeText(into: start)
            return body(UnsafeBufferPointer(start: start, count: Self.textLength))
        }
    }

    /// Writes the text form, without quotes, into an answer being written: every session.get has one.
    public func writeText(to out: inout JSONOutput) {
        var text: (UInt64, UInt64, UInt64) = (0, 0, 0)
        withUnsafeMutableBytes(of: &text) { bytes in
            encodeText(into: bytes.baseAddress!.assumingMemoryBound(to: UInt8.self))
            out.write(json: UnsafeRawBufferPointer(rebasing: bytes[..<Self.textLength]))
        }
    }

    /// The text form's length: 128 bits in base64url without padding.
    public static let textLength = 22

    /// The text form into `text` (22 bytes), straight from the two words: 21 characters of six bits,
    /// then the last two bits. Base64URL.encode gives the same from the 16 bytes, through a generic
    /// loop that costs a session.get's answer more than the rest of the id.
    private func encodeText(into text: UnsafeMutablePointer<UInt8>) {
        Self.alphabet.withUTF8Buffer { alphabet in
            for k in 0..<10 { text[k] = alphabet[Int(truncatingIfNeeded: (high >> (58 - 6 * k)) & 63)] }
            text[10] = alphabet[Int(truncatingIfNeeded: (high & 0xF) << 2 | low >> 62)]
            for k in 0..<10 { text[11 + k] = alphabet[Int(truncatingIfNeeded: (low >> (56 - 6 * k)) & 63)] }
            text[21] = alphabet[Int(truncatingIfNeeded: (low & 0x3) << 4)]
        }
    }

    private static let alphabet: StaticString = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

    /// Spreads ids over the table: they are uniformly distributed already.
    public func hash(into hasher: inout Hasher) { hasher.combine(high) }
}

/// The second half of a token's SHA-256, compared in constant time when the token is presented.
package struct SessionCheck: Sendable {
    let high: UInt64
    let low: UInt64

    init(high: UInt64, low: UInt64) {
        self.high = high
        self.low = low
    }

    /// A check from its 16 bytes, big-endian (as another store keeps it); `nil` for another length.
    package init?(bytes: some Collection<UInt8>) {
        guard let id = SessionID(bytes: bytes) else { return nil }
        self.init(high: id.high, low: id.low)
    }

    /// Its 16 bytes, big-endian.
    package var bytes: [UInt8] { SessionID(high: high, low: low).bytes }

    /// Equality without an early exit, so response time says nothing about how much matched.
    package func matches(_ other: SessionCheck) -> Bool {
        ((high ^ other.high) | (low ^ other.low)) == 0
    }
}
