/// A strict RFC 8259 parser from UTF-8 bytes to `JSONValue`.
///
/// It accepts exactly one value with optional surrounding whitespace (space, tab, LF, CR) and refuses
/// everything RFC 8259 does not allow, plus two things it only discourages: duplicate member names and
/// nesting deeper than `maximumDepth`. Input must be valid UTF-8 (no overlong forms, no encoded
/// surrogates, nothing above U+10FFFF) and must not start with a byte order mark.
///
/// Numbers without fraction or exponent that fit in 64 bits become `.int`; every other number becomes
/// `.double`, so `1.0` and `1e2` are doubles. A number too large for a `Double` is refused.
///
/// The parser works in place over the bytes: a string without escapes is made from its bytes in one go,
/// and errors are only built when parsing fails.
struct JSONParser {
    /// The deepest nesting of arrays and objects accepted: a value at this depth is parsed, one level
    /// more is refused (so parsing never runs out of stack).
    static let maximumDepth = 64
    /// A request's limit (PROTOCOL.md section 3): no argument needs more, and less nesting is less
    /// work for every hostile frame.
    static let requestMaximumDepth = 32

    /// Why parsing failed, and at which byte offset (counted from 0).
    struct Failure: Error, Sendable, Equatable {
        enum Reason: Sendable, Equatable {
            case byteOrderMark
            case invalidUTF8
            /// A token other than the one named was found (or the input ended).
            case expected(String)
            case invalidLiteral
            case trailingData
            case unterminatedString
            case controlCharacter
            case invalidEscape
            case invalidUnicodeEscape
            case unpairedSurrogate
            case leadingZero
            case numberOutOfRange
            /// Nesting deeper than the limit given.
            case tooDeep(Int)
            case duplicateMember(String)
            /// More members than the limit given (the caller's, for an object it reads member by member).
            case tooManyMembers(Int)
        }

        /// The byte offset in the input where the problem is.
        var offset: Int
        var reason: Reason
        /// Whether the input ended at `offset`.
        var atEnd: Bool

        /// A message for people: what is wrong and where, never quoting the input (except a shortened
        /// duplicate member name).
        var message: String {
            switch reason {
            case .byteOrderMark:
                return "payload starts with a byte order mark"
            case .invalidUTF8:
                return "payload is not valid UTF-8 at byte \(offset)"
            case .tooManyMembers:
                return "request has \(detail) (at byte \(offset))"
            default:
                return "invalid JSON at byte \(offset): \(detail)"
            }
        }

        private var detail: String {
            switch reason {
            case .byteOrderMark: return "byte order mark"
            case .invalidUTF8: return "invalid UTF-8"
            case .expected(let what): return atEnd ? "unexpected end of input, expected \(what)" : "expected \(what)"
            case .invalidLiteral: return "invalid literal (expected true, false or null)"
            case .trailingData: return "unexpected data after the JSON value"
            case .unterminatedString: return "unterminated string"
            case .controlCharacter: return "unescaped control character in string"
            case .invalidEscape: return "invalid escape sequence in string"
            case .invalidUnicodeEscape: return "invalid \\u escape (expected 4 hex digits)"
            case .unpairedSurrogate: return "unpaired UTF-16 surrogate in \\u escape"
            case .leadingZero: return "number has a leading zero"
            case .numberOutOfRange: return "number is too large"
            case .tooDeep(let limit): return "nesting deeper than \(limit) levels"
            case .duplicateMember(let name): return "duplicate member '\(Self.shortened(name))'"
            case .tooManyMembers(let limit): return "more than \(limit) members besides v, id, op and args"
            }
        }

        /// At most 64 Unicode scalars of `name`, with control characters replaced, so that a message
        /// stays short and printable.
        private static func shortened(_ name: String) -> String {
            var scalars = String.UnicodeScalarView()
            var count = 0
            for scalar in name.unicodeScalars {
                if count == 64 {
                    scalars.append(contentsOf: "...".unicodeScalars)
                    break
                }
                let value = scalar.value
                scalars.append(value < 0x20 || (0x7F...0x9F).contains(value) ? "\u{FFFD}" : scalar)
                count += 1
            }
            return String(scalars)
        }
    }

    let bytes: UnsafeRawBufferPointer
    private let depthLimit: Int
    var index = 0
    private var depth = 0

    init(bytes: UnsafeRawBufferPointer, depthLimit: Int = maximumDepth) {
        self.bytes = bytes
        self.depthLimit = depthLimit
    }

    /// Parses `bytes` as one JSON text.
    static func parse(_ bytes: UnsafeRawBufferPointer) throws(Failure) -> JSONValue {
        var parser = JSONParser(bytes: bytes)
        return try parser.parseDocument()
    }

    /// Parses `bytes` as one JSON text, returning the failure rather than throwing it.
    static func parseResult(_ bytes: UnsafeRawBufferPointer) -> Result<JSONValue, Failure> {
        do {
            return .success(try parse(bytes))
        } catch {
            return .failure(error)
        }
    }

    /// Parses `bytes` as one JSON text whose top level is an object, handing its members to `member`
    /// (name, the name's offset, and the parser at the value, which `member` must read with
    /// `parseValue()` or check with `checkValue()`) without building a dictionary of them: a request
    /// envelope is read this way. Returns `false`, once the whole text has parsed, when the top level
    /// is not an object. `member` must refuse duplicate names itself.
    static func parseObjectMembers(
        _ bytes: UnsafeRawBufferPointer, depthLimit: Int = maximumDepth,
        _ member: (MemberName, Int, inout JSONParser) throws(Failure) -> Void
    ) throws(Failure) -> Bool {
        var parser = JSONParser(bytes: bytes, depthLimit: depthLimit)
        try parser.beginDocument()
        guard parser.index < bytes.count, bytes[parser.index] == UInt8(ascii: "{") else {
            _ = try parser.parseValue()
            try parser.endDocument()
            return false
        }
        try parser.parseMembers(member)
        try parser.endDocument()
        return true
    }

    // MARK: - Structure

    private mutating func parseDocument() throws(Failure) -> JSONValue {
        try beginDocument()
        let value = try parseValue()
        try endDocument()
        return value
    }

    /// Refuses a byte order mark and skips leading whitespace.
    private mutating func beginDocument() throws(Failure) {
        if bytes.count >= 3 && bytes[0] == 0xEF && bytes[1] == 0xBB && bytes[2] == 0xBF {
            throw failure(.byteOrderMark, at: 0)
        }
        skipWhitespace()
    }

    /// Skips trailing whitespace and refuses anything after it.
    private mutating func endDocument() throws(Failure) {
        skipWhitespace()
        guard index == bytes.count else { throw failure(.trailingData) }
    }

    mutating func parseValue() throws(Failure) -> JSONValue {
        guard index < bytes.count else { throw failure(.expected("a value")) }
        switch bytes[index] {
        case UInt8(ascii: "{"): return try parseObject()
        case UInt8(ascii: "["): return try parseArray()
        case UInt8(ascii: "\""): return .string(try parseString())
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return try parseNumber()
        case UInt8(ascii: "t"):
            try parseLiteral(0x74_72_75_65, length: 4)  // "true"
            return .bool(true)
        case UInt8(ascii: "f"):
            try parseLiteral(0x66_61_6C_73_65, length: 5)  // "false"
            return .bool(false)
        case UInt8(ascii: "n"):
            try parseLiteral(0x6E_75_6C_6C, length: 4)  // "null"
            return .null
        default:
            throw failure(.expected("a value"))
        }
    }

    /// Consumes the literal whose ASCII bytes, most significant first, make `pattern`.
    private mutating func parseLiteral(_ pattern: UInt64, length: Int) throws(Failure) {
        guard bytes.count - index >= length else { throw failure(.invalidLiteral) }
        var found: UInt64 = 0
        for offset in 0..<length {
            found = found << 8 | UInt64(bytes[index + offset])
        }
        guard found == pattern else { throw failure(.invalidLiteral) }
        index += length
    }

    mutating func enterContainer() throws(Failure) {
        depth += 1
        guard depth <= depthLimit else { throw failure(.tooDeep(depthLimit)) }
        index += 1
        skipWhitespace()
    }

    private mutating func parseObject() throws(Failure) -> JSONValue {
        var members: [String: JSONValue] = [:]
        try parseMembers { name, nameOffset, parser throws(Failure) in
            let value = try parser.parseValue()
            if members.isEmpty { members.reserveCapacity(4) }
            if members.updateValue(value, forKey: name) != nil {
                throw Failure(offset: nameOffset, reason: .duplicateMember(name), atEnd: false)
            }
        }
        return .object(members)
    }

    /// Parses the object whose `{` is at `index`, handing each member to `member` as it is read: its
    /// name, the name's offset and the parser at its value, which `member` must consume. Duplicates
    /// are `member`'s to refuse.
    mutating func parseMembers(
        _ member: (String, Int, inout JSONParser) throws(Failure) -> Void
    ) throws(Failure) {
        try parseMembers { (name: MemberName, offset, parser) throws(Failure) in
            try member(parser.string(of: name), offset, &parser)
        }
    }

    /// `parseMembers(_:)`, handing each name as it lies in the text.
    mutating func parseMembers(
        _ member: (MemberName, Int, inout JSONParser) throws(Failure) -> Void
    ) throws(Failure) {
        try enterContainer()
        guard index < bytes.count else { throw failure(.expected("a member name or '}'")) }
        if bytes[index] == UInt8(ascii: "}") {
            index += 1
            depth -= 1
            return
        }
        guard bytes[index] == UInt8(ascii: "\"") else { throw failure(.expected("a member name or '}'")) }
        while true {
            let nameOffset = index
            let (content, hasEscapes) = try scanString()
            let name = MemberName(content: content, hasEscapes: hasEscapes)
            skipWhitespace()
            guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { throw failure(.expected("':'")) }
            index += 1
            skipWhitespace()
            try member(name, nameOffset, &self)
            skipWhitespace()
            guard index < bytes.count else { throw failure(.expected("',' or '}'")) }
            switch bytes[index] {
            case UInt8(ascii: ","):
                index += 1
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\"") else {
                    throw failure(.expected("a member name"))
                }
            case UInt8(ascii: "}"):
                index += 1
                depth -= 1
                return
            default:
                throw failure(.expected("',' or '}'"))
            }
        }
    }

    private mutating func parseArray() throws(Failure) -> JSONValue {
        var elements: [JSONValue] = []
        try parseElements { parser throws(Failure) in
            if elements.isEmpty { elements.reserveCapacity(4) }
            elements.append(try parser.parseValue())
        }
        return .array(elements)
    }

    /// Parses the array whose `[` is at `index`, handing the parser to `element` at each element,
    /// which `element` must consume.
    mutating func parseElements(_ element: (inout JSONParser) throws(Failure) -> Void) throws(Failure) {
        try enterContainer()
        guard index < bytes.count else { throw failure(.expected("a value or ']'")) }
        if bytes[index] == UInt8(ascii: "]") {
            index += 1
            depth -= 1
            return
        }
        while true {
            try element(&self)
            skipWhitespace()
            guard index < bytes.count else { throw failure(.expected("',' or ']'")) }
            switch bytes[index] {
            case UInt8(ascii: ","):
                index += 1
                skipWhitespace()
            case UInt8(ascii: "]"):
                index += 1
                depth -= 1
                return
            default:
                throw failure(.expected("',' or ']'"))
            }
        }
    }

    @inline(__always)
    mutating func skipWhitespace() {
        while index < bytes.count {
            switch bytes[index] {
            case 0x20, 0x0A, 0x0D, 0x09: index += 1
            default: return
            }
        }
    }

    // MARK: - Numbers

    /// Parses the number starting at `index` (a '-' or a digit), following RFC 8259's grammar exactly.
    private mutating func parseNumber() throws(Failure) -> JSONValue {
        let start = index
        let negative = bytes[index] == UInt8(ascii: "-")
        if negative { index += 1 }
        guard index < bytes.count, let first = Self.digit(bytes[index]) else { throw failure(.expected("a digit")) }
        index += 1
        var magnitude = UInt64(first)
        var overflow = false
        if first == 0 {
            if index < bytes.count, Self.digit(bytes[index]) != nil { throw failure(.leadingZero, at: start) }
        } else {
            while index < bytes.count, let digit = Self.digit(bytes[index]) {
                let (times10, overflow1) = magnitude.multipliedReportingOverflow(by: 10)
                let (sum, overflow2) = times10.addingReportingOverflow(UInt64(digit))
                magnitude = sum
                overflow = overflow || overflow1 || overflow2
                index += 1
            }
        }
        var isInteger = true
        if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
            isInteger = false
            index += 1
            try skipDigits(describing: "a digit after '.'")
        }
        if index < bytes.count, bytes[index] | 0x20 == UInt8(ascii: "e") {
            isInteger = false
            index += 1
            if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") {
                index += 1
            }
            try skipDigits(describing: "a digit in the exponent")
        }
        if isInteger && !overflow {
            if !negative && magnitude <= UInt64(Int64.max) {
                return .int(Int64(magnitude))
            }
            if negative && magnitude <= UInt64(1) << 63 {
                return .int(Int64(bitPattern: 0 &- magnitude))
            }
        }
        // The text is plain ASCII and matches the grammar, which `Double(_:)` accepts in full.
        let text = String(decoding: UnsafeRawBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
        guard let value = Double(text), value.isFinite else { throw failure(.numberOutOfRange, at: start) }
        return .double(value)
    }

    /// Moves past one or more digits.
    private mutating func skipDigits(describing expectation: String) throws(Failure) {
        guard index < bytes.count, Self.digit(bytes[index]) != nil else { throw failure(.expected(expectation)) }
        index += 1
        while index < bytes.count, Self.digit(bytes[index]) != nil {
            index += 1
        }
    }

    @inline(__always)
    private static func digit(_ byte: UInt8) -> UInt8? {
        let value = byte &- UInt8(ascii: "0")
        return value < 10 ? value : nil
    }

    // MARK: - Errors

    func failure(_ reason: Failure.Reason, at offset: Int? = nil) -> Failure {
        let offset = offset ?? index
        return Failure(offset: offset, reason: reason, atEnd: offset >= bytes.count)
    }
}
