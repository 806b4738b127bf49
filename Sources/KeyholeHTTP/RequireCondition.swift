import KeyholeProtocol

/// A `?require=` condition of `/authz` on the session's data (HTTP.md, "require"): `KEY` holds when
/// `data[KEY]` is `true`; `KEY:VALUE` when it is the string `VALUE` or an array holding it. Keys and
/// values are compared by their bytes, never as Swift Strings (equal under Unicode equivalence).
struct RequireCondition: Equatable, Sendable {
    var key: String
    /// `nil`: the member must be `true`.
    var value: String?

    static let maxConditions = 8
    static let maxConditionBytes = 256
    static let maxKeyBytes = 64

    /// Why a query is refused (answered 400 with this text).
    struct Refusal: Error, Equatable {
        var message: String
    }

    /// The conditions of a query string (without the `?`). Every parameter must be `require`.
    static func parse(query: Substring) throws(Refusal) -> [RequireCondition] {
        var conditions: [RequireCondition] = []
        // Split by bytes: `&` and `=` are ASCII, and a Character split would read grapheme clusters.
        for parameterBytes in query.utf8.split(separator: UInt8(ascii: "&"), omittingEmptySubsequences: true) {
            let parameter = Substring(parameterBytes)
            let (name, rawValue) = parameter.utf8.firstIndex(of: UInt8(ascii: "=")).map {
                (parameter[..<$0], parameter[parameter.utf8.index(after: $0)...])
            } ?? (parameter, parameter[parameter.endIndex...])
            guard name.utf8.elementsEqual("require".utf8) else {
                throw Refusal(message: "unknown query parameter (only 'require' is taken)")
            }
            guard conditions.count < maxConditions else { throw Refusal(message: "more than \(maxConditions) require conditions") }
            guard rawValue.utf8.count <= 3 * maxConditionBytes, let decoded = percentDecode(rawValue) else {
                throw Refusal(message: "a require condition that is not percent-encoded UTF-8 of at most \(maxConditionBytes) bytes")
            }
            guard decoded.count <= maxConditionBytes else {
                throw Refusal(message: "a require condition longer than \(maxConditionBytes) bytes")
            }
            let colon = decoded.firstIndex(of: UInt8(ascii: ":"))
            let key = decoded[..<(colon ?? decoded.endIndex)]
            guard (1...maxKeyBytes).contains(key.count), key.allSatisfy(isKeyByte) else {
                throw Refusal(message: "a require key must be 1 to \(maxKeyBytes) of A-Z a-z 0-9 _ . -")
            }
            var value: String?
            if let colon {
                guard let text = String(validating: decoded[decoded.index(after: colon)...], as: UTF8.self) else {
                    throw Refusal(message: "a require value that is not UTF-8")
                }
                value = text
            }
            conditions.append(RequireCondition(key: String(decoding: key, as: UTF8.self), value: value))
        }
        return conditions
    }

    /// Whether the condition holds on a session's data (an object; `nil`: no data).
    func holds(in data: [String: JSONValue]?) -> Bool {
        guard let data, let index = data.index(forKey: key), ExactString.equal(data[index].key, key) else { return false }
        switch (data[index].value, value) {
        case (.bool(true), nil): return true
        case (.string(let found), let wanted?): return ExactString.equal(found, wanted)
        case (.array(let items), let wanted?):
            return items.contains { if case .string(let found) = $0 { ExactString.equal(found, wanted) } else { false } }
        default: return false
        }
    }

    private static func isKeyByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
            UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "-"): true
        default: false
        }
    }

    /// Form decoding: `%XX` to its byte, `+` to a space; `nil` on a malformed escape.
    static func percentDecode(_ text: Substring) -> [UInt8]? {
        var out: [UInt8] = []
        out.reserveCapacity(text.utf8.count)
        var bytes = text.utf8.makeIterator()
        while let byte = bytes.next() {
            switch byte {
            case UInt8(ascii: "%"):
                guard let high = bytes.next().flatMap(hexValue), let low = bytes.next().flatMap(hexValue) else { return nil }
                out.append(high << 4 | low)
            case UInt8(ascii: "+"): out.append(UInt8(ascii: " "))
            default: out.append(byte)
            }
        }
        return out
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        default: nil
        }
    }
}
