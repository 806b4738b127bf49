import NIOHTTP1

/// The session token a forward-auth request carries, as PROTOCOL.md section 8's middleware contract
/// takes it: `Authorization: Bearer kh_…` when the request has one, else the session cookie; never the
/// query string. A value that is not a token's shape is no credential (keyholed's store is not asked).
enum SessionCredential {
    /// `kh_` and 43 base64url characters: 32 random bytes.
    static let tokenBytes = 46

    /// The token in `headers`, or `nil`. One linear pass over the headers and each cookie header.
    static func token(in headers: HTTPHeaders, cookieName: String) -> String? {
        var bearer: Substring?
        var cookie: Substring?
        for (name, value) in headers {
            if bearer == nil, name.utf8.count == 13, name.lowercased() == "authorization" {
                bearer = bearerToken(value)
            } else if cookie == nil, name.utf8.count == 6, name.lowercased() == "cookie" {
                cookie = Self.cookie(named: cookieName, in: value)
            }
        }
        // A bearer that starts like a token decides, well-formed or not: it is what the client meant.
        if let bearer { return isToken(bearer) ? String(bearer) : nil }
        if let cookie, isToken(cookie) { return String(cookie) }
        return nil
    }

    /// The credentials of `Bearer kh_…` (scheme case-insensitive), `nil` for any other value.
    private static func bearerToken(_ value: String) -> Substring? {
        let trimmed = value.drop { $0 == " " || $0 == "\t" }
        guard trimmed.utf8.count > 7, trimmed.prefix(7).lowercased() == "bearer " else { return nil }
        let credentials = trimmed.dropFirst(7).drop { $0 == " " }
        let token = credentials.prefix { $0 != " " && $0 != "\t" }
        return token.utf8.starts(with: "kh_".utf8) ? token : nil
    }

    /// The value of the first cookie named `name` (byte for byte) in one `Cookie` header; a malformed
    /// pair beside it is skipped, so it cannot hide the session's. Surrounding quotes are removed.
    static func cookie(named name: String, in header: String) -> Substring? {
        for pair in header.split(separator: ";", omittingEmptySubsequences: true) {
            let item = pair.drop { $0 == " " || $0 == "\t" }
            guard let equals = item.utf8.firstIndex(of: UInt8(ascii: "=")) else { continue }
            let key = item[..<equals]
            guard key.utf8.elementsEqual(name.utf8) else { continue }
            var value = item[item.index(after: equals)...]
            while let last = value.utf8.last, last == UInt8(ascii: " ") || last == UInt8(ascii: "\t") { value = value.dropLast() }
            if value.utf8.count >= 2, value.utf8.first == UInt8(ascii: "\""), value.utf8.last == UInt8(ascii: "\"") {
                value = value.dropFirst().dropLast()
            }
            return value
        }
        return nil
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
