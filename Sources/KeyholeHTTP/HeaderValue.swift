/// An identity header's value, made safe to pass on: every byte outside `!` to `~`, and `%` itself,
/// is percent-encoded (upper-case hex). No control character, CR, LF, space or non-ASCII byte reaches
/// a header, whatever a token's claims or a user record carried, and an application gets the exact
/// bytes back with its URL-decoding function. Bounded: a longer value is not cut (a cut identity could
/// name someone else), it is refused.
enum HeaderValue {
    /// The longest encoded value passed on.
    static let maxBytes = 1024

    /// The encoded value, `nil` when it would be longer than `maxBytes`. Linear in the input.
    static func encode(_ value: String) -> String? {
        // The usual value needs nothing encoded: it is passed on as it is, with no copy.
        if value.utf8.count <= maxBytes, value.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "%") }) { return value }
        var out: [UInt8] = []
        out.reserveCapacity(value.utf8.count)
        for byte in value.utf8 {
            if byte > 0x20 && byte < 0x7F && byte != UInt8(ascii: "%") {
                out.append(byte)
            } else {
                out.append(UInt8(ascii: "%"))
                out.append(hexDigits[Int(byte >> 4)])
                out.append(hexDigits[Int(byte & 0x0F)])
            }
            if out.count > maxBytes { return nil }
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static let hexDigits = Array("0123456789ABCDEF".utf8)
}
