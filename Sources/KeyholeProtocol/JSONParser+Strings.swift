/// Strings: the scan that finds a string's end and checks it (a word, then vector blocks, then
/// byte by byte where a byte needs a look), escapes, UTF-8 sequences, and decoding.
extension JSONParser {
    /// Parses the string whose opening quote is at `index`.
    ///
    /// A first pass finds the closing quote and checks everything (UTF-8, control characters, escapes,
    /// surrogate pairs); a string without escapes is then made straight from its bytes, one with escapes
    /// is decoded into a string of at most the same number of bytes.
    mutating func parseString() throws(Failure) -> String {
        let (content, hasEscapes) = try scanString()
        let text = UnsafeRawBufferPointer(rebasing: bytes[content])
        return hasEscapes ? Self.decodeEscapes(text) : String(decoding: text, as: UTF8.self)
    }

    /// Checks the string whose opening quote is at `index` and moves past it, returning where its
    /// content lies (between the quotes) and whether it has escapes.
    mutating func scanString() throws(Failure) -> (content: Range<Int>, hasEscapes: Bool) {
        let openingQuote = index
        index += 1
        let contentStart = index
        var hasEscapes = false
        while true {
            // First one word, as below: most strings (member names, operations, issuers) end within
            // it. A longer one goes on sixteen bytes at a time (`skipPlainBlocks`), out of line so
            // that the short ones do not pay for its set-up.
            var found = false
            if bytes.count &- index >= 8 {
                let special = specialBytes(at: index)
                if special == 0 {
                    (index, found) = Self.skipPlainBlocks(in: bytes, from: index &+ 8)
                } else {
                    index &+= Self.firstFlaggedByte(special)
                    found = true
                }
            }
            // Near the end of the frame, eight at a time: a word with such a byte moves straight to
            // the first of them (the lowest byte flagged is always one, `specialBytes`), so the plain
            // bytes before it need no look of their own.
            while !found && bytes.count &- index >= 8 {
                let special = specialBytes(at: index)
                guard special == 0 else {
                    index &+= Self.firstFlaggedByte(special)
                    break
                }
                index &+= 8
            }
            guard index < bytes.count else { throw failure(.unterminatedString, at: openingQuote) }
            let byte = bytes[index]
            if byte >= 0x20 && byte < 0x80 {
                if byte == UInt8(ascii: "\"") { break }
                if byte == UInt8(ascii: "\\") {
                    hasEscapes = true
                    try scanEscape(openingQuote: openingQuote)
                } else {
                    index += 1
                }
            } else if byte < 0x20 {
                throw failure(.controlCharacter)
            } else {
                try scanUTF8Sequence()
            }
        }
        let content = contentStart..<index
        index += 1  // the closing quote
        return (content, hasEscapes)
    }

    /// `specialBytes` of the word at `offset` (eight bytes, which the caller checked are there).
    @inline(__always)
    func specialBytes(at offset: Int) -> UInt64 {
        Self.specialBytes(UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: offset, as: UInt64.self)))
    }

    /// The high bit of each byte of `word` (loaded little-endian: its first byte in memory is the
    /// least significant) that needs a look of its own: a byte with its high bit, a quote, a backslash
    /// or a control character (`JSONOutput.escapeBytes`), give or take bytes after the first such one.
    /// A borrow in the tests only runs from a byte rightly flagged towards more significant ones: the
    /// lowest byte flagged is always one, and no such byte goes unflagged.
    @inline(__always)
    static func specialBytes(_ word: UInt64) -> UInt64 {
        (word & 0x8080_8080_8080_8080) | JSONOutput.escapeBytes(word)
    }

    /// From `start`, sixteen bytes at a time while none needs a look of its own (a quote, a
    /// backslash, a control character, a byte of a multi-byte sequence): tokens are hundreds of plain
    /// ASCII bytes, and a vector register checks sixteen in a dozen instructions. Returns where it
    /// stopped: at the first such byte (`found`), which each lane of the test marks exactly, or with
    /// fewer than sixteen bytes left.
    @inline(never)
    static func skipPlainBlocks(in bytes: UnsafeRawBufferPointer, from start: Int) -> (index: Int, found: Bool) {
        var index = start
        while bytes.count &- index >= 16 {
            let lanes = specialLanes(bytes.loadUnaligned(fromByteOffset: index, as: SIMD16<UInt8>.self))
            if let first = firstSpecialLane(lanes) { return (index &+ first, true) }
            index &+= 16
        }
        return (index, false)
    }

    /// Which of `block`'s bytes need a look of its own, as `specialBytes` flags them (outside
    /// 0x20...0x7F: a control character or a byte of a multi-byte sequence; a quote; a backslash):
    /// all ones in each such byte's lane, read as two words, the first in memory lowest.
    ///
    /// Written for the vector instructions it becomes (a dozen, SSE2). Every operand is spelled a
    /// `SIMD16<UInt8>` and the mask is read as words: `SIMD16(repeating:)` left to inference, the
    /// operators that take a scalar, and `any` all compiled lane by lane instead (a loop of sixteen
    /// steps per operator, which made a token's scan fifteen times slower).
    @inline(__always)
    static func specialLanes(_ block: SIMD16<UInt8>) -> SIMD2<UInt64> {
        // 0x20...0x7F less 0x20, wrapping, is 0x00...0x5F: one unsigned comparison for both ends.
        let outside = (block &- SIMD16<UInt8>(repeating: 0x20)) .> SIMD16<UInt8>(repeating: 0x5F)
        let quote = block .== SIMD16<UInt8>(repeating: 0x22)
        let backslash = block .== SIMD16<UInt8>(repeating: 0x5C)
        return unsafeBitCast(outside .| quote .| backslash, to: SIMD2<UInt64>.self)
    }

    /// The offset in its block of the first byte `specialLanes` marked, or nil when it marked none.
    @inline(__always)
    static func firstSpecialLane(_ lanes: SIMD2<UInt64>) -> Int? {
        if lanes[0] != 0 { return UInt64(littleEndian: lanes[0]).trailingZeroBitCount &>> 3 }
        if lanes[1] != 0 { return 8 &+ UInt64(littleEndian: lanes[1]).trailingZeroBitCount &>> 3 }
        return nil
    }

    /// The offset of the lowest byte flagged in `mask` (not 0; a high bit per byte): for a word loaded
    /// little-endian, the first in memory.
    @inline(__always)
    static func firstFlaggedByte(_ mask: UInt64) -> Int {
        mask.trailingZeroBitCount &>> 3
    }

    /// Checks the escape sequence whose backslash is at `index` and moves past it.
    private mutating func scanEscape(openingQuote: Int) throws(Failure) {
        let start = index
        guard index + 1 < bytes.count else { throw failure(.unterminatedString, at: openingQuote) }
        switch bytes[index + 1] {
        case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"), UInt8(ascii: "f"),
            UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
            index += 2
        case UInt8(ascii: "u"):
            guard let unit = Self.hex4(bytes, at: index + 2) else { throw failure(.invalidUnicodeEscape, at: start) }
            index += 6
            switch unit {
            case 0xD800...0xDBFF:
                // A high surrogate must be followed at once by an escaped low surrogate.
                guard bytes.count - index >= 6, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u"),
                    let low = Self.hex4(bytes, at: index + 2), (0xDC00...0xDFFF).contains(low)
                else { throw failure(.unpairedSurrogate, at: start) }
                index += 6
            case 0xDC00...0xDFFF:
                throw failure(.unpairedSurrogate, at: start)
            default:
                break
            }
        default:
            throw failure(.invalidEscape, at: start)
        }
    }

    /// Checks the multi-byte UTF-8 sequence whose lead byte is at `index` (Unicode table 3-7) and moves
    /// past it.
    private mutating func scanUTF8Sequence() throws(Failure) {
        let lead = bytes[index]
        let length: Int
        var low: UInt8 = 0x80
        var high: UInt8 = 0xBF
        switch lead {
        case 0xC2...0xDF: length = 2
        case 0xE0: length = 3; low = 0xA0
        case 0xE1...0xEC, 0xEE...0xEF: length = 3
        case 0xED: length = 3; high = 0x9F  // no UTF-16 surrogates
        case 0xF0: length = 4; low = 0x90
        case 0xF1...0xF3: length = 4
        case 0xF4: length = 4; high = 0x8F  // nothing above U+10FFFF
        default: throw failure(.invalidUTF8)  // continuation bytes, C0, C1, F5...FF
        }
        guard bytes.count - index >= length else { throw failure(.invalidUTF8) }
        let second = bytes[index + 1]
        guard second >= low && second <= high else { throw failure(.invalidUTF8) }
        for offset in 2..<length where bytes[index + offset] & 0xC0 != 0x80 {
            throw failure(.invalidUTF8)
        }
        index += length
    }

    /// The value of the four hex digits at `offset`, or `nil` when they are not four hex digits.
    private static func hex4(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> UInt32? {
        guard offset >= 0, bytes.count - offset >= 4 else { return nil }
        var value: UInt32 = 0
        for position in offset..<offset + 4 {
            let byte = bytes[position]
            let digit: UInt8
            switch byte {
            case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
            case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
            case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
            default: return nil
            }
            value = value << 4 | UInt32(digit)
        }
        return value
    }

    /// Decodes the content of a string already checked by `parseString`. Every escape is at least as
    /// long as the UTF-8 it stands for, so the result fits in `content.count` bytes.
    static func decodeEscapes(_ content: UnsafeRawBufferPointer) -> String {
        String(unsafeUninitializedCapacity: content.count) { output in
            var input = 0
            var written = 0
            func emit(_ byte: UInt8) {
                if written < output.count {
                    output[written] = byte
                    written += 1
                }
            }
            while input < content.count {
                let byte = content[input]
                guard byte == UInt8(ascii: "\\"), input + 1 < content.count else {
                    emit(byte)
                    input += 1
                    continue
                }
                let escape = content[input + 1]
                input += 2
                switch escape {
                case UInt8(ascii: "b"): emit(0x08)
                case UInt8(ascii: "f"): emit(0x0C)
                case UInt8(ascii: "n"): emit(0x0A)
                case UInt8(ascii: "r"): emit(0x0D)
                case UInt8(ascii: "t"): emit(0x09)
                case UInt8(ascii: "u"):
                    var scalar = hex4(content, at: input) ?? 0xFFFD
                    input += 4
                    if (0xD800...0xDBFF).contains(scalar) {
                        // Checked by scanEscape: an escaped low surrogate follows.
                        let low = hex4(content, at: input + 2) ?? 0xDC00
                        scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low &- 0xDC00)
                        input += 6
                    }
                    switch scalar {
                    case ..<0x80:
                        emit(UInt8(scalar))
                    case ..<0x800:
                        emit(UInt8(0xC0 | scalar >> 6))
                        emit(UInt8(0x80 | scalar & 0x3F))
                    case ..<0x10000:
                        emit(UInt8(0xE0 | scalar >> 12))
                        emit(UInt8(0x80 | scalar >> 6 & 0x3F))
                        emit(UInt8(0x80 | scalar & 0x3F))
                    default:
                        emit(UInt8(0xF0 | scalar >> 18 & 0x07))
                        emit(UInt8(0x80 | scalar >> 12 & 0x3F))
                        emit(UInt8(0x80 | scalar >> 6 & 0x3F))
                        emit(UInt8(0x80 | scalar & 0x3F))
                    }
                default: emit(escape)  // '"', '\\' and '/' stand for themselves
                }
            }
            return written
        }
    }
}
