import NIOCore

/// Compact JSON written straight into memory a `ByteBuffer` reserved for it.
///
/// Answers are written on every request, piece by piece; going through `ByteBuffer` costs a capacity
/// check, an index update and an exclusivity check of its storage per piece, which added up to over a
/// microsecond for a `session.get` answer. This writes into one reserved region instead. It never writes
/// past the region: a piece that does not fit marks the output `overflowed`, and from then on pieces are
/// only counted, not written, so that `needed` says exactly how much room a second try takes
/// (`ByteBuffer.writeJSON(guess:)`).
///
/// Only `ByteBuffer.writeJSON` makes one, and it cannot be copied out of the closure it is lent to.
///
/// The pieces are `@inlinable`: answers are written from other modules (the store writes
/// `session.get`'s), and a call per piece, with a `memmove` for each literal, was most of an answer's
/// cost; inlined, a literal's copy is a few stores of constants.
public struct JSONOutput: ~Copyable {
    @usableFromInline let base: UnsafeMutableRawBufferPointer
    /// Bytes written so far (`count`).
    @usableFromInline var written = 0
    /// A piece did not fit (`overflowed`).
    @usableFromInline var didOverflow = false
    /// Once overflowed: what was written plus what was only counted.
    @usableFromInline var counted = 0

    /// Bytes written so far.
    @inlinable public var count: Int { written }
    /// A piece did not fit: what was written is incomplete and must not be used.
    @inlinable public var overflowed: Bool { didOverflow }
    /// The bytes the whole output takes: `count` while everything fits, and also what was only counted
    /// once a piece did not.
    @inlinable public var needed: Int { didOverflow ? counted : written }

    /// Output into `base`, which outlives it (internal for the tests, which give it exact regions).
    @usableFromInline init(_ base: UnsafeMutableRawBufferPointer) {
        self.base = base
    }

    /// Whether `bytes` more fit; when they do not, marks the output overflowed and counts them.
    @inlinable @inline(__always)
    mutating func room(for bytes: Int) -> Bool {
        guard !didOverflow, bytes <= base.count &- written else {
            overflow(counting: bytes)
            return false
        }
        return true
    }

    /// The slow part of `room(for:)`, out of line.
    @usableFromInline mutating func overflow(counting bytes: Int) {
        if !didOverflow {
            didOverflow = true
            counted = written
        }
        counted &+= bytes
    }

    /// Writes text that needs no escaping as it is (keys, punctuation, literals).
    @inlinable @inline(__always)
    public mutating func write(_ text: StaticString) {
        // withUTF8Buffer, not utf8Start: a one-scalar literal may be stored as a scalar, not as bytes.
        text.withUTF8Buffer { bytes in
            guard bytes.count > 0, room(for: bytes.count) else { return }
            (base.baseAddress! + written).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
            written &+= bytes.count
        }
    }

    /// Writes bytes that are JSON already (a stored object, an encoded id).
    @inlinable
    public mutating func write(json bytes: UnsafeRawBufferPointer) {
        guard bytes.count > 0, room(for: bytes.count), let source = bytes.baseAddress else { return }
        (base.baseAddress! + written).copyMemory(from: source, byteCount: bytes.count)
        written &+= bytes.count
    }

    /// Writes one byte of JSON punctuation.
    @inlinable @inline(__always)
    public mutating func write(byte: UInt8) {
        guard room(for: 1) else { return }
        base[written] = byte
        written &+= 1
    }

    /// Writes an integer in decimal: its length counted first, then its digits written in place from
    /// the end, two at a time (every answer has several times in it).
    @inlinable @inline(__always)
    public mutating func write(integer value: Int64) {
        let magnitude = value.magnitude
        var digits = 1
        if magnitude &- 1_000_000_000 < 9_000_000_000 {
            digits = 10  // a time in seconds, from 2001 to 2286: most integers in answers
        } else {
            var bound: UInt64 = 10
            while digits < 20, magnitude >= bound {
                digits &+= 1
                bound = bound &* 10  // past 10^19 it wraps, but 20 digits is the most there is
            }
        }
        let length = digits &+ (value < 0 ? 1 : 0)
        guard room(for: length) else { return }
        let out = base.baseAddress!.assumingMemoryBound(to: UInt8.self) + written
        if value < 0 { out[0] = UInt8(ascii: "-") }
        var position = length
        var rest = magnitude
        Self.pairs.withUTF8Buffer { pairs in
            while rest >= 100 {
                let pair = Int(rest % 100) &* 2
                rest /= 100
                position &-= 2
                out[position] = pairs[pair]
                out[position &+ 1] = pairs[pair &+ 1]
            }
            if rest >= 10 {
                let pair = Int(rest) &* 2
                out[position &- 2] = pairs[pair]
                out[position &- 1] = pairs[pair &+ 1]
            } else {
                out[position &- 1] = UInt8(ascii: "0") &+ UInt8(truncatingIfNeeded: rest)
            }
        }
        written &+= length
    }

    /// "00" to "99", the two digits of each number below 100 (a literal, not a stored global: no
    /// initialisation check where it is inlined).
    @inlinable static var pairs: StaticString {
        """
        00010203040506070809101112131415161718192021222324252627282930313233343536373839\
        40414243444546474849505152535455565758596061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899
        """
    }

    /// Writes a JSON string literal, escaping what RFC 8259 requires and nothing else.
    @inlinable @inline(__always)
    public mutating func write(string: String) {
        // A native string's bytes are read where they are; `withUTF8` would copy (and retain) it first.
        if string.utf8.withContiguousStorageIfAvailable({ write(stringBytes: $0) }) != nil { return }
        var string = string
        string.withUTF8 { write(stringBytes: $0) }
    }

    /// Writes UTF-8 `bytes` as a JSON string literal.
    @inlinable @inline(__always)
    public mutating func write(stringBytes bytes: UnsafeBufferPointer<UInt8>) {
        // Measured first, so that the room is checked once and a string is never written in part.
        let length = Self.quotedLength(bytes)
        guard room(for: length) else { return }
        guard length != bytes.count &+ 2 else {
            // Nearly every string needs no escaping: one copy.
            let out = base.baseAddress!.assumingMemoryBound(to: UInt8.self)
            out[written] = UInt8(ascii: "\"")
            if bytes.count > 0 { (out + (written &+ 1)).update(from: bytes.baseAddress!, count: bytes.count) }
            written &+= bytes.count &+ 2
            out[written &- 1] = UInt8(ascii: "\"")
            return
        }
        write(escaping: bytes)
    }

    /// `write(stringBytes:)` of a string with something to escape, whose room is checked (out of line:
    /// rare).
    @usableFromInline
    mutating func write(escaping bytes: UnsafeBufferPointer<UInt8>) {
        let out = base.baseAddress!.assumingMemoryBound(to: UInt8.self)
        var count = written
        out[count] = UInt8(ascii: "\"")
        count &+= 1
        for byte in bytes {
            guard Self.needsEscape(byte) else {
                out[count] = byte
                count &+= 1
                continue
            }
            out[count] = UInt8(ascii: "\\")
            if let letter = Self.shortEscape(byte) {
                out[count &+ 1] = letter
            } else {
                out[count &+ 1] = UInt8(ascii: "u")
                out[count &+ 2] = UInt8(ascii: "0")
                out[count &+ 3] = UInt8(ascii: "0")
                out[count &+ 4] = Self.hexDigit(byte >> 4)
                out[count &+ 5] = Self.hexDigit(byte & 0x0F)
                count &+= 4
            }
            count &+= 2
        }
        out[count] = UInt8(ascii: "\"")
        written = count &+ 1
    }

    @inlinable @inline(__always)
    static func needsEscape(_ byte: UInt8) -> Bool {
        byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\")
    }

    /// The character after the backslash of a two-byte escape, or `nil` for a byte written "\u00XX".
    @inlinable @inline(__always)
    static func shortEscape(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"): byte
        case 0x0A: UInt8(ascii: "n")
        case 0x0D: UInt8(ascii: "r")
        case 0x09: UInt8(ascii: "t")
        case 0x08: UInt8(ascii: "b")
        case 0x0C: UInt8(ascii: "f")
        default: nil
        }
    }

    /// The length of `bytes` as a JSON string literal, quotes included.
    @inlinable @inline(__always)
    static func quotedLength(_ bytes: UnsafeBufferPointer<UInt8>) -> Int {
        let count = bytes.count
        var index = 0
        // Eight bytes at a time while none needs escaping: nearly every string is such.
        if count >= 8, let base = bytes.baseAddress {
            let raw = UnsafeRawPointer(base)
            while count &- index > 8, !mayNeedEscape(raw.loadUnaligned(fromByteOffset: index, as: UInt64.self)) {
                index &+= 8
            }
            // The last one to eight bytes, as the string's last word (which may overlap one already
            // checked) rather than byte by byte: nothing in it needs escaping, so nothing does.
            if count &- index <= 8, !mayNeedEscape(raw.loadUnaligned(fromByteOffset: count &- 8, as: UInt64.self)) {
                return count &+ 2
            }
        }
        // From the first word with a byte to escape (or a string shorter than a word), byte by byte.
        var length = count &+ 2
        while index < count {
            let byte = bytes[index]
            // A short escape ("\n") adds one byte, "\u00XX" five.
            if needsEscape(byte) { length &+= shortEscape(byte) == nil ? 5 : 1 }
            index &+= 1
        }
        return length
    }

    /// Whether any of eight bytes (in either byte order) is a quote, a backslash or a control
    /// character. Each test is the exact word-at-a-time form of "some byte is zero" (or less than
    /// 0x20): a borrow only ever starts at a byte that is, so none is missed and none is made up.
    @inlinable @inline(__always)
    static func mayNeedEscape(_ word: UInt64) -> Bool {
        escapeBytes(word) != 0
    }

    /// `mayNeedEscape`'s test with its answer per byte: the high bit of each byte flagged. Only bytes
    /// after (more significant than) one rightly flagged may be flagged wrongly, by its borrow.
    @inlinable @inline(__always)
    static func escapeBytes(_ word: UInt64) -> UInt64 {
        let ones: UInt64 = 0x0101_0101_0101_0101
        let highs: UInt64 = 0x8080_8080_8080_8080
        let quote = word ^ (ones &* 0x22)
        let backslash = word ^ (ones &* 0x5C)
        let special = ((quote &- ones) & ~quote) | ((backslash &- ones) & ~backslash) | ((word &- ones &* 0x20) & ~word)
        return special & highs
    }

    /// The length of `value` as compact JSON, counted without writing it (nor sorting its members).
    static func length(of value: JSONValue) -> Int {
        switch value {
        case .null: return 4
        case .bool(let value): return value ? 4 : 5
        case .int(let value): return Self.digits(value)
        case .double(let value): return value.isFinite ? value.description.utf8.count : 4
        case .string(var value):
            if let length = value.utf8.withContiguousStorageIfAvailable({ quotedLength($0) }) { return length }
            return value.withUTF8 { quotedLength($0) }
        case .array(let elements):
            return elements.reduce(2 &+ Swift.max(0, elements.count &- 1)) { $0 &+ length(of: $1) }
        case .object(let members):
            return members.reduce(2 &+ Swift.max(0, members.count &- 1)) { total, member in
                var key = member.key
                return total &+ key.withUTF8 { quotedLength($0) } &+ 1 &+ length(of: member.value)
            }
        }
    }

    /// The decimal digits of `value`, with its sign.
    private static func digits(_ value: Int64) -> Int {
        var magnitude = value.magnitude
        var count = value < 0 ? 2 : 1
        while magnitude >= 10 {
            magnitude /= 10
            count &+= 1
        }
        return count
    }

    /// Writes `members` in `order`, comma-separated, without the braces.
    private mutating func write(members: [String: JSONValue], in order: some Collection<[String: JSONValue].Index>) {
        var first = true
        for index in order {
            if !first { write(byte: UInt8(ascii: ",")) }
            first = false
            let (key, value) = members[index]
            write(string: key)
            write(byte: UInt8(ascii: ":"))
            write(value: value)
        }
    }

    /// Objects of at most this many members are ordered without allocating.
    static let smallObjectMembers = 16

    /// Writes any JSON value; object members in sorted order, non-finite numbers as `null`.
    public mutating func write(value: JSONValue) {
        if overflowed {
            // Only counted from here on: no sorting, no writing.
            counted &+= Self.length(of: value)
            return
        }
        switch value {
        case .null:
            write("null")
        case .bool(let value):
            write(value ? "true" : "false")
        case .int(let value):
            write(integer: value)
        case .double(let value):
            if value.isFinite {
                // Swift's shortest round-trip form ("2.0", "1e+20") is valid JSON and reads back as a double.
                var text = value.description
                text.withUTF8 { write(json: UnsafeRawBufferPointer($0)) }
            } else {
                write("null")
            }
        case .string(let value):
            write(string: value)
        case .array(let elements):
            write(byte: UInt8(ascii: "["))
            for (index, element) in elements.enumerated() {
                if index > 0 { write(byte: UInt8(ascii: ",")) }
                write(value: element)
            }
            write(byte: UInt8(ascii: "]"))
        case .object(let members):
            write(byte: UInt8(ascii: "{"))
            if members.count <= Self.smallObjectMembers {
                // Most answers are small objects: their order is found on the stack, where `sorted`
                // would allocate an array for every object written.
                withUnsafeTemporaryAllocation(of: [String: JSONValue].Index.self, capacity: members.count) { room in
                    let order = UnsafeMutableBufferPointer(rebasing: room[..<members.count])
                    _ = order.initialize(from: members.indices)
                    // Insertion sort: at most smallObjectMembers members, so bounded work.
                    for sorted in order.indices.dropFirst() {
                        var at = sorted
                        while at > 0, members.keys[order[at]] < members.keys[order[at - 1]] {
                            order.swapAt(at, at - 1)
                            at -= 1
                        }
                    }
                    write(members: members, in: order)
                    _ = order.deinitialize()
                }
            } else {
                write(members: members, in: members.indices.sorted { members.keys[$0] < members.keys[$1] })
            }
            write(byte: UInt8(ascii: "}"))
        }
    }

    private static func hexDigit(_ nibble: UInt8) -> UInt8 {
        nibble < 10 ? UInt8(ascii: "0") &+ nibble : UInt8(ascii: "a") &+ nibble &- 10
    }
}

extension ByteBuffer {
    /// Writes what `body` writes to a `JSONOutput` over at least `bytes` reserved bytes; `false`, with
    /// the buffer unchanged, when that did not fit.
    @inlinable @discardableResult
    public mutating func writeJSON(reserving bytes: Int, _ body: (inout JSONOutput) -> Void) -> Bool {
        writeJSONCounting(reserving: bytes, body) == nil
    }

    /// `writeJSON(reserving:)`, returning `nil` when it fitted, else the bytes the output takes.
    @inlinable
    public mutating func writeJSONCounting(reserving bytes: Int, _ body: (inout JSONOutput) -> Void) -> Int? {
        var needed: Int?
        writeWithUnsafeMutableBytes(minimumWritableBytes: bytes) { region in
            var output = JSONOutput(region)
            body(&output)
            guard !output.overflowed else {
                needed = output.needed
                return 0
            }
            return output.count
        }
        return needed
    }

    /// Writes what `body` writes, for output whose size is not known beforehand: `guess` bytes are
    /// reserved first and, when that is too little, exactly what the first try counted.
    @inlinable
    public mutating func writeJSON(guess: Int, _ body: (inout JSONOutput) -> Void) {
        var reserve = Swift.max(guess, 64)
        // A body writes the same each time, so the second try fits; the loop only guards the rule.
        while let needed = writeJSONCounting(reserving: reserve, body) {
            reserve = Swift.max(needed, reserve &+ 1)
        }
    }
}
