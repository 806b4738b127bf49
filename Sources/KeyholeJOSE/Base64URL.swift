/// Base64url without padding (RFC 7515 section 2 and appendix C), decoded strictly.
///
/// A JWS is only safe to verify if each of its bytes has one meaning: the signing input is the text as
/// sent, but the header and payload are read from their decoded bytes. A lenient decoder that skips
/// stray characters or ignores non-zero trailing bits lets two different texts decode to the same
/// bytes, so decoding here refuses everything but the one canonical encoding:
/// - only `A-Z a-z 0-9 - _`: no `=` padding, no whitespace, no `+` or `/` of plain base64;
/// - a length that is not 1 more than a multiple of 4 (such a text cannot encode whole bytes);
/// - unused bits of the last character equal to zero.
public enum Base64URL {
    /// The 6-bit value of each ASCII character, or `invalid`.
    private static let invalid: UInt8 = 0xFF
    private static let decodeTable: [UInt8] = {
        var table = [UInt8](repeating: invalid, count: 256)
        for (value, character) in alphabet.enumerated() { table[Int(character)] = UInt8(value) }
        return table
    }()
    private static let alphabet: [UInt8] =
        Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    /// Whether `byte` is one of the 64 characters of the base64url alphabet.
    ///
    /// By ranges rather than through the decoding table: callers test every byte of a token, and each
    /// reach for a global costs a check that it is initialised.
    @inlinable
    public static func isAlphabet(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"):
            return true
        default:
            return false
        }
    }

    /// The bytes `text` encodes, or `nil` when it is not canonical unpadded base64url.
    ///
    /// The empty text decodes to no bytes.
    public static func decode(_ text: some StringProtocol) -> [UInt8]? {
        let utf8 = text.utf8
        if let decoded = utf8.withContiguousStorageIfAvailable({ decode(bytes: $0) }) { return decoded }
        // Bridged or otherwise non-contiguous strings: copy once, then take the fast path.
        return Array(utf8).withUnsafeBufferPointer { decode(bytes: $0) }
    }

    /// Decodes ASCII bytes; the parser of compact JWS calls this on slices of the token.
    static func decode(bytes: UnsafeBufferPointer<UInt8>) -> [UInt8]? {
        let count = bytes.count
        let remainder = count % 4
        guard remainder != 1 else { return nil }
        let outputCount = count / 4 * 3 + (remainder == 0 ? 0 : remainder - 1)
        return decodeTable.withUnsafeBufferPointer { table -> [UInt8]? in
            var failed = false
            let output = [UInt8](unsafeUninitializedCapacity: outputCount) { out, initialized in
                var input = 0
                var written = 0
                // Whole quanta: 4 characters give 3 bytes. Invalid characters are collected in one
                // bit test per quantum, so the loop has no early exits.
                while input + 4 <= count {
                    let a = table[Int(bytes[input])]
                    let b = table[Int(bytes[input + 1])]
                    let c = table[Int(bytes[input + 2])]
                    let d = table[Int(bytes[input + 3])]
                    if (a | b | c | d) & 0xC0 != 0 {
                        failed = true
                        break
                    }
                    out[written] = a << 2 | b >> 4
                    out[written + 1] = b << 4 | c >> 2
                    out[written + 2] = c << 6 | d
                    input += 4
                    written += 3
                }
                if !failed && remainder != 0 {
                    let a = table[Int(bytes[input])]
                    let b = table[Int(bytes[input + 1])]
                    let c = remainder == 3 ? table[Int(bytes[input + 2])] : 0
                    // The last character carries bits beyond the final byte; a canonical encoder
                    // leaves them zero (2 characters: low 4 bits of b; 3 characters: low 2 bits of c).
                    let unusedBitsSet = remainder == 2 ? b & 0x0F != 0 : c & 0x03 != 0
                    if (a | b | c) & 0xC0 != 0 || unusedBitsSet {
                        failed = true
                    } else {
                        out[written] = a << 2 | b >> 4
                        written += 1
                        if remainder == 3 {
                            out[written] = b << 4 | c >> 2
                            written += 1
                        }
                    }
                }
                // Bytes are trivial, so after a failure reporting none as initialised frees nothing wrongly.
                initialized = failed ? 0 : written
            }
            return failed ? nil : output
        }
    }

    /// `bytes` as unpadded base64url.
    public static func encode(_ bytes: some Collection<UInt8>) -> String {
        encode(bytes, prefix: "")
    }

    /// `prefix` followed by `bytes` as unpadded base64url, built in one allocation.
    public static func encode(_ bytes: some Collection<UInt8>, prefix: StaticString) -> String {
        if let encoded = bytes.withContiguousStorageIfAvailable({ encode(UnsafeRawBufferPointer($0), prefix: prefix) }) {
            return encoded
        }
        return Array(bytes).withUnsafeBytes { encode($0, prefix: prefix) }
    }

    /// How many characters `count` bytes take.
    public static func encodedCount(_ count: Int) -> Int {
        count / 3 * 4 + (count % 3 == 0 ? 0 : count % 3 + 1)
    }

    private static func encode(_ bytes: UnsafeRawBufferPointer, prefix: StaticString) -> String {
        prefix.withUTF8Buffer { prefix in
            String(unsafeUninitializedCapacity: prefix.count + encodedCount(bytes.count)) { output in
                _ = output.initialize(from: prefix)
                return prefix.count + encode(bytes, into: UnsafeMutableBufferPointer(rebasing: output[prefix.count...]))
            }
        }
    }

    /// Writes `bytes` as unpadded base64url into `output` (at least `encodedCount(bytes.count)` long);
    /// returns how many characters it wrote.
    public static func encode(_ bytes: UnsafeRawBufferPointer, into output: UnsafeMutableBufferPointer<UInt8>) -> Int {
        let count = bytes.count
        precondition(output.count >= encodedCount(count))
        return alphabet.withUnsafeBufferPointer { alphabet in
            var index = 0
            var written = 0
            while index + 3 <= count {
                let (a, b, c) = (bytes[index], bytes[index + 1], bytes[index + 2])
                output[written] = alphabet[Int(a >> 2)]
                output[written + 1] = alphabet[Int((a & 0x03) << 4 | b >> 4)]
                output[written + 2] = alphabet[Int((b & 0x0F) << 2 | c >> 6)]
                output[written + 3] = alphabet[Int(c & 0x3F)]
                index += 3
                written += 4
            }
            if count - index == 1 {
                let a = bytes[index]
                output[written] = alphabet[Int(a >> 2)]
                output[written + 1] = alphabet[Int((a & 0x03) << 4)]
                written += 2
            } else if count - index == 2 {
                let (a, b) = (bytes[index], bytes[index + 1])
                output[written] = alphabet[Int(a >> 2)]
                output[written + 1] = alphabet[Int((a & 0x03) << 4 | b >> 4)]
                output[written + 2] = alphabet[Int((b & 0x0F) << 2)]
                written += 3
            }
            return written
        }
    }
}
