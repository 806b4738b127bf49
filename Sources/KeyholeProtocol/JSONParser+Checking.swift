#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Checking a value without building it, and reading a checked object's members where they lie: a
/// request's `args` is checked with its envelope, and an operation then reads the two or three
/// members it knows straight from the frame (`CheckedJSONObject`), without a dictionary of them.
extension JSONParser {
    /// A member's name as it lies in the text: made into a `String` (`string(of:)`) only by a caller
    /// that needs one, compared by its bytes (`name(_:is:)`) by one that knows what it looks for.
    struct MemberName {
        /// Between the quotes.
        let content: Range<Int>
        let hasEscapes: Bool
    }

    /// The name as a string.
    func string(of name: MemberName) -> String {
        let text = UnsafeRawBufferPointer(rebasing: bytes[name.content])
        return name.hasEscapes ? Self.decodeEscapes(text) : String(decoding: text, as: UTF8.self)
    }

    /// Whether the name is exactly `literal`'s bytes (after unescaping).
    func name(_ name: MemberName, is literal: StaticString) -> Bool {
        literal.withUTF8Buffer { literal in
            guard name.hasEscapes else { return Self.same(UnsafeRawBufferPointer(rebasing: bytes[name.content]), UnsafeRawBufferPointer(literal)) }
            return string(of: name).utf8.elementsEqual(literal)
        }
    }

    /// Checks the value at `index` exactly as `parseValue()` would (refusing the same inputs with the
    /// same failures, repeated names included) and moves past it, building nothing that allocates
    /// for an object of up to eight members with short names.
    mutating func checkValue() throws(Failure) {
        guard index < bytes.count else { throw failure(.expected("a value")) }
        switch bytes[index] {
        case UInt8(ascii: "{"): _ = try checkObject()
        case UInt8(ascii: "["): try checkArray()
        case UInt8(ascii: "\""): _ = try scanString()
        default: _ = try parseValue()  // a number or a literal (a non-integer makes a String to read it)
        }
    }

    /// Checks the object whose `{` is at `index` as `checkValue()` does; returns how many members it has.
    mutating func checkObject() throws(Failure) -> Int {
        var names = SeenNames()
        try parseMembers { (name: MemberName, nameOffset, parser) throws(Failure) in
            // The value first, then the name's repeat: the order parseObject() finds faults in.
            try parser.checkValue()
            guard names.insert(name, in: parser) else {
                throw Failure(offset: nameOffset, reason: .duplicateMember(parser.string(of: name)), atEnd: false)
            }
        }
        return names.count
    }

    private mutating func checkArray() throws(Failure) {
        try parseElements { parser throws(Failure) in try parser.checkValue() }
    }

    /// In an object `checkObject()` accepted, starting at its `{`: moves to the value of the member
    /// whose name is exactly `name`'s bytes (after unescaping) and returns true, or returns false.
    /// The members it passes are skipped, not checked again: an operation looks up several names, and
    /// a token passed over for each would otherwise be checked byte by byte each time.
    mutating func findMember(named name: UnsafeRawBufferPointer) throws(Failure) -> Bool {
        try enterContainer()
        guard bytes[index] != UInt8(ascii: "}") else { return false }
        while true {
            let (content, hasEscapes) = scanCheckedString()
            skipWhitespace()
            index += 1  // ':'
            skipWhitespace()
            if Self.name(UnsafeRawBufferPointer(rebasing: bytes[content]), hasEscapes: hasEscapes, is: name) {
                return true
            }
            skipCheckedValue()
            skipWhitespace()
            guard bytes[index] == UInt8(ascii: ",") else { return false }  // '}'
            index += 1
            skipWhitespace()
        }
    }

    /// In a text already checked: moves past the string whose opening quote is at `index`, returning
    /// where its content lies and whether it has escapes. Quotes are found with `memchr`; one is the
    /// end unless an odd run of backslashes escapes it (each backslash is counted for one quote only).
    mutating func scanCheckedString() -> (content: Range<Int>, hasEscapes: Bool) {
        let start = index + 1
        var from = start
        while true {
            guard let found = memchr(bytes.baseAddress! + from, Int32(UInt8(ascii: "\"")), bytes.count - from) else {
                assertionFailure("a checked string has no closing quote")
                index = bytes.count
                return (start..<bytes.count, false)
            }
            let quote = UnsafeRawPointer(found) - bytes.baseAddress!
            var backslashes = 0
            while quote - backslashes > start, bytes[quote - backslashes - 1] == UInt8(ascii: "\\") { backslashes += 1 }
            if backslashes % 2 == 0 {
                index = quote + 1
                let hasEscapes = memchr(bytes.baseAddress! + start, Int32(UInt8(ascii: "\\")), quote - start) != nil
                return (start..<quote, hasEscapes)
            }
            from = quote + 1
        }
    }

    /// In a text already checked: moves past the value at `index` without checking it again.
    mutating func skipCheckedValue() {
        switch bytes[index] {
        case UInt8(ascii: "\""):
            _ = scanCheckedString()
        case UInt8(ascii: "{"), UInt8(ascii: "["):
            var open = 0
            repeat {
                switch bytes[index] {
                case UInt8(ascii: "\""): _ = scanCheckedString()
                case UInt8(ascii: "{"), UInt8(ascii: "["): open += 1; index += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"): open -= 1; index += 1
                default: index += 1
                }
            } while open > 0
        default:
            // A number or a literal: up to the next structural character or whitespace.
            while index < bytes.count {
                switch bytes[index] {
                case UInt8(ascii: ","), UInt8(ascii: "}"), UInt8(ascii: "]"), 0x20, 0x0A, 0x0D, 0x09: return
                default: index += 1
                }
            }
        }
    }

    /// Whether two runs of bytes are the same: their lengths, then their bytes, a plain loop for a
    /// name as short as the envelope's and the operations' (where memcmp's call cost more than the
    /// comparison) and memcmp past that (a generic byte loop cost more than the rest of the names).
    @inline(__always)
    static func same(_ a: UnsafeRawBufferPointer, _ b: UnsafeRawBufferPointer) -> Bool {
        guard a.count == b.count else { return false }
        guard a.count > 8 else {
            var differ: UInt8 = 0
            for index in 0..<a.count { differ |= a[index] ^ b[index] }
            return differ == 0
        }
        return memcmp(a.baseAddress!, b.baseAddress!, a.count) == 0
    }

    /// Whether a member name as it lies in the text (`hasEscapes`: with escapes still in it) is `name`.
    private static func name(_ text: UnsafeRawBufferPointer, hasEscapes: Bool, is name: UnsafeRawBufferPointer) -> Bool {
        guard hasEscapes else { return same(text, name) }
        return decodeEscapes(text).utf8.elementsEqual(name)
    }
}

/// The names seen in one object, to refuse a repeat as a dictionary would (names are compared as
/// Swift strings, as `parseObject()`'s dictionary compares them, so that both refuse the same objects).
///
/// While every name is plain ASCII without escapes, and there are at most eight, they are compared
/// by their bytes where they lie: for ASCII text that is the same as comparing strings, and no
/// `String` is made (a request's `args` has two or three such names). The first other name moves
/// every name into a set of strings, so that thousands of names cost linear time and a name
/// canonically equal to an ASCII one (a Kelvin sign for "K") is still a repeat.
struct SeenNames {
    private var first = InlineArray<8, Range<Int>>(repeating: 0..<0)
    private var more: Set<String> = []
    /// Whether the names are in `more`, not `first`.
    private var asStrings = false
    /// How many names were inserted.
    private(set) var count = 0

    /// Adds `name`, which lies in `parser`'s text; `false` when it was there already.
    mutating func insert(_ name: JSONParser.MemberName, in parser: JSONParser) -> Bool {
        let text = UnsafeRawBufferPointer(rebasing: parser.bytes[name.content])
        if !asStrings, count < first.count, !name.hasEscapes, Self.isASCII(text) {
            for slot in 0..<count where JSONParser.same(UnsafeRawBufferPointer(rebasing: parser.bytes[first[slot]]), text) {
                return false
            }
            first[count] = name.content
            count += 1
            return true
        }
        if !asStrings {
            asStrings = true
            more.reserveCapacity(count + 1)
            for slot in 0..<count {
                more.insert(String(decoding: UnsafeRawBufferPointer(rebasing: parser.bytes[first[slot]]), as: UTF8.self))
            }
        }
        guard more.insert(parser.string(of: name)).inserted else { return false }
        count += 1
        return true
    }

    private static func isASCII(_ text: UnsafeRawBufferPointer) -> Bool {
        var bits: UInt8 = 0
        for byte in text { bits |= byte }
        return bits < 0x80
    }
}
