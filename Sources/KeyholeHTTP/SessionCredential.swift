import NIOHTTP1

/// The session token a forward-auth request carries, as PROTOCOL.md section 8's middleware contract
/// takes it: `Authorization: Bearer kh_…` when the request has one, else the session cookie; never the
/// query string. A value that is not a token's shape is no credential (keyholed's store is not asked).
/// Every header is read in one pass over its bytes, with nothing allocated but the token.
enum SessionCredential {
    /// `kh_` and 43 base64url characters: 32 random bytes.
    static let tokenBytes = 46

    /// The token in `headers`, or `nil`.
    static func token(in headers: HTTPHeaders, cookieName: String) -> String? {
        var bearer: Substring?
        var cookie: Substring?
        for (name, value) in headers {
            if bearer == nil, equalsIgnoringASCIICase(name, "authorization") {
                bearer = bearerToken(value)
            } else if cookie == nil, equalsIgnoringASCIICase(name, "cookie") {
                cookie = Self.cookie(named: cookieName, in: value)
            }
        }
        // A bearer that starts like a token decides, well-formed or not: it is what the client meant.
        if let bearer { return isToken(bearer) ? String(bearer) : nil }
        if let cookie, isToken(cookie) { return String(cookie) }
        return nil
    }

    /// Whether `name` is `lowercase` (ASCII letters in any case), byte for byte otherwise.
    static func equalsIgnoringASCIICase(_ name: String, _ lowercase: StaticString) -> Bool {
        guard name.utf8.count == lowercase.utf8CodeUnitCount else { return false }
        return lowercase.withUTF8Buffer { expected in
            zip(name.utf8, expected).allSatisfy { byte, wanted in
                byte == wanted || (byte >= UInt8(ascii: "A") && byte <= UInt8(ascii: "Z") && byte | 0x20 == wanted)
            }
        }
    }

    /// The credentials of `Bearer kh_…` (scheme case-insensitive), `nil` for any other value.
    private static func bearerToken(_ value: String) -> Substring? {
        let utf8 = value.utf8
        var index = utf8.startIndex
        while index < utf8.endIndex, utf8[index] == UInt8(ascii: " ") || utf8[index] == UInt8(ascii: "\t") { index = utf8.index(after: index) }
        let scheme = "bearer".utf8
        for expected in scheme {
            guard index < utf8.endIndex, utf8[index] | 0x20 == expected else { return nil }
            index = utf8.index(after: index)
        }
        guard index < utf8.endIndex, utf8[index] == UInt8(ascii: " ") else { return nil }
        while index < utf8.endIndex, utf8[index] == UInt8(ascii: " ") { index = utf8.index(after: index) }
        var end = index
        while end < utf8.endIndex, utf8[end] != UInt8(ascii: " "), utf8[end] != UInt8(ascii: "\t") { end = utf8.index(after: end) }
        let token = value[index..<end]
        return token.utf8.starts(with: "kh_".utf8) ? token : nil
    }

    /// The value of the first cookie named `name` (byte for byte) in one `Cookie` header; a malformed
    /// pair beside it is skipped, so it cannot hide the session's. Surrounding quotes are removed.
    static func cookie(named name: String, in header: String) -> Substring? {
        let utf8 = header.utf8
        var start = utf8.startIndex
        while start < utf8.endIndex {
            var end = start
            while end < utf8.endIndex, utf8[end] != UInt8(ascii: ";") { end = utf8.index(after: end) }
            if let value = value(of: name, in: header[start..<end]) { return value }
            start = end < utf8.endIndex ? utf8.index(after: end) : end
        }
        return nil
    }

    /// The value of `pair` (`name=value`, blanks around it) when its name is `name`.
    private static func value(of name: String, in pair: Substring) -> Substring? {
        let utf8 = pair.utf8
        var index = utf8.startIndex
        while index < utf8.endIndex, utf8[index] == UInt8(ascii: " ") || utf8[index] == UInt8(ascii: "\t") { index = utf8.index(after: index) }
        for expected in name.utf8 {
            guard index < utf8.endIndex, utf8[index] == expected else { return nil }
            index = utf8.index(after: index)
        }
        guard index < utf8.endIndex, utf8[index] == UInt8(ascii: "=") else { return nil }
        var value = pair[utf8.index(after: index)...]
        while let last = value.utf8.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { value = value.dropLast() }
        if value.utf8.count >= 2, value.utf8.first == UInt8(ascii: "\""), value.utf8.last == UInt8(ascii: "\"") {
            value = value.dropFirst().dropLast()
        }
        return value
    }

    /// Whether `value` has a session token's shape.
    static func isToken(_ value: Substring) -> Bool {
        guard value.utf8.count == tokenBytes, value.utf8.starts(with: "kh_".utf8) else { return false }
        return value.utf8.dropFirst(3).allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                UInt8(ascii: "-"), UInt8(ascii: "_"): true
            default: false
            }
        }
    }
}
