import NIOCore
import Testing

@testable import KeyholeProtocol
import KeyholeTestSupport

/// `JSONOutput` writes into reserved memory without per-piece checks of the buffer: it must write
/// exactly JSON's escapes, never past its room, and leave the buffer as it was when something did not fit.
@Suite("JSON output")
struct JSONOutputTests {
    /// The escaping RFC 8259 requires, written the plain way, byte by byte: the reference.
    static func reference(_ string: String) -> [UInt8] {
        var out: [UInt8] = [UInt8(ascii: "\"")]
        for byte in string.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out += Array(#"\""#.utf8)
            case UInt8(ascii: "\\"): out += Array(#"\\"#.utf8)
            case 0x0A: out += Array(#"\n"#.utf8)
            case 0x0D: out += Array(#"\r"#.utf8)
            case 0x09: out += Array(#"\t"#.utf8)
            case 0x08: out += Array(#"\b"#.utf8)
            case 0x0C: out += Array(#"\f"#.utf8)
            case ..<0x20: out += Array(String(format: byte).utf8)
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
        return out
    }

    /// Strings of plain bytes, quotes, backslashes, every control character and multi-byte scalars.
    static func randomString(_ generator: inout SeededGenerator) -> String {
        let pieces = ["a", "Z", "0", " ", "\"", "\\", "/", "é", "😀", "\u{7F}"] + (0..<0x20).map { String(UnicodeScalar(UInt8($0))) }
        let length = Int(generator.next() % 40)
        return (0..<length).map { _ in pieces[Int(generator.next() % UInt64(pieces.count))] }.joined()
    }

    /// What `body` writes into a region of exactly `room` bytes, and whether the 16 guard bytes
    /// after the region are untouched.
    static func write(room: Int, _ body: (inout JSONOutput) -> Void) -> (fitted: Bool, bytes: [UInt8], guardIntact: Bool) {
        let memory = UnsafeMutableRawBufferPointer.allocate(byteCount: room + 16, alignment: 1)
        defer { memory.deallocate() }
        memory.initializeMemory(as: UInt8.self, repeating: 0xAA)
        var output = JSONOutput(UnsafeMutableRawBufferPointer(rebasing: memory[..<room]))
        body(&output)
        let fitted = !output.overflowed
        return (fitted, Array(memory[..<output.count]), memory[room...].allSatisfy { $0 == 0xAA })
    }

    @Test("strings: exactly the reference's escapes when they fit in the room, never a byte past it")
    func stringsInEveryRoom() throws {
        var generator = SeededGenerator(state: 20261125)
        for _ in 0..<300 {
            let string = Self.randomString(&generator)
            let expected = Self.reference(string)
            for room in 0...(expected.count + 2) {
                let result = Self.write(room: room) { $0.write(string: string) }
                #expect(result.guardIntact, "wrote past \(room) bytes")
                #expect(result.fitted == (expected.count <= room), "\(string.debugDescription) in \(room) bytes")
                if result.fitted { #expect(result.bytes == expected) }
            }
            // Through a buffer, with a guess too small: written again with more room until it fits.
            var buffer = ByteBuffer(string: "pre")
            buffer.writeJSON(guess: 1) { $0.write(string: string) }
            #expect(Array(buffer.readableBytesView) == Array("pre".utf8) + expected)
            #expect(try JSONValue.parse(ByteBuffer(bytes: expected)) == .string(string))
        }
    }

    @Test("eight bytes at a time: a byte needing an escape is found at every position, beside any others, and no other byte is taken for one")
    func wordCheck() {
        func needs(_ byte: UInt8) -> Bool { byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") }
        var generator = SeededGenerator(state: 20261126)
        for byte in UInt8.min...UInt8.max {
            for position in 0..<8 {
                for _ in 0..<16 {
                    // The other seven: any byte that needs none (high bytes included, as UTF-8 brings).
                    var word: UInt64 = 0
                    for other in 0..<8 {
                        var filler = UInt8(truncatingIfNeeded: generator.next())
                        while needs(filler) { filler = UInt8(truncatingIfNeeded: generator.next()) }
                        word |= UInt64(other == position ? byte : filler) << (8 * other)
                    }
                    #expect(JSONOutput.mayNeedEscape(word) == needs(byte), "byte \(byte) at \(position)")
                }
            }
        }
        // Long strings with one special byte anywhere: the word path and the tail agree with the reference.
        for length in 0..<40 {
            for position in 0..<max(1, length) {
                var bytes = Array(repeating: UInt8(ascii: "x"), count: length)
                if length > 0 { bytes[position] = 0x01 }
                let string = String(decoding: bytes, as: UTF8.self)
                let result = Self.write(room: 256) { $0.write(string: string) }
                #expect(result.bytes == Self.reference(string))
            }
        }
    }

    @Test("the parser's word test: the first byte it flags in a word is the first that needs a look, for every pair of bytes")
    func firstFlaggedByte() {
        func special(_ byte: UInt8) -> Bool { byte < 0x20 || byte >= 0x80 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") }
        // Every two bytes at every two places of a word, the other six plain: the borrows of the word
        // tests may flag a plain byte after a special one (a '#' after a quote), never before.
        for first in 0..<8 {
            for second in (first + 1)..<8 {
                for a in UInt8.min...UInt8.max {
                    for b in UInt8.min...UInt8.max where special(a) || special(b) {
                        // As loaded little-endian from memory: byte i of the text is bits 8i..8i+7.
                        var word: UInt64 = 0x7878_7878_7878_7878  // "xxxxxxxx"
                        word &= ~(0xFF << (8 * UInt64(first))) & ~(0xFF << (8 * UInt64(second)))
                        word |= UInt64(a) << (8 * UInt64(first)) | UInt64(b) << (8 * UInt64(second))
                        let mask = JSONParser.specialBytes(word)
                        let expected = special(a) ? first : second
                        guard mask != 0, JSONParser.firstFlaggedByte(mask) == expected else {
                            Issue.record("bytes \(a) at \(first) and \(b) at \(second): flagged \(mask == 0 ? -1 : JSONParser.firstFlaggedByte(mask))")
                            return
                        }
                    }
                }
            }
        }
        // A word of plain bytes flags nothing.
        #expect(JSONParser.specialBytes(UInt64(littleEndian: 0x7E7D_5B5D_2321_207A)) == 0)
    }

    @Test("the parser's block test: the first lane it marks is the first byte that needs a look, for every byte at every place, before or after another")
    func firstSpecialLane() {
        func special(_ byte: UInt8) -> Bool { byte < 0x20 || byte >= 0x80 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") }
        let plainBlock = SIMD16<UInt8>(repeating: UInt8(ascii: "x"))
        for place in 0..<16 {
            for byte in UInt8.min...UInt8.max {
                var block = plainBlock
                block[place] = byte
                // A special byte later in the block changes nothing about the first.
                var withLater = block
                if place < 15 { withLater[15] = UInt8(ascii: "\"") }
                let expected = special(byte) ? place : nil
                let first = JSONParser.firstSpecialLane(JSONParser.specialLanes(block))
                let firstWithLater = JSONParser.firstSpecialLane(JSONParser.specialLanes(withLater))
                guard first == expected, firstWithLater == (expected ?? (place < 15 ? 15 : nil)) else {
                    Issue.record("byte \(byte) at \(place): first \(String(describing: first)), with a quote at 15 \(String(describing: firstWithLater))")
                    return
                }
            }
        }
        // Every plain byte in one block or another: none marked.
        let plain = (UInt8(0x20)...0x7F).filter { !special($0) }
        for start in stride(from: 0, to: plain.count, by: 16) {
            var block = plainBlock
            for (offset, byte) in plain[start..<min(start + 16, plain.count)].enumerated() { block[offset] = byte }
            #expect(JSONParser.specialLanes(block) == .zero)
        }
    }

    @Test("integers: Swift's decimal form, written only where it fits", arguments: [Int64.min, Int64.min + 1, -100, -99, -10, -9, -1, 0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 12345, 999_999_999, 1_000_000_000, -1_000_000_000, -1_700_000_000, 1_700_000_000, 9_999_999_999, 10_000_000_000, 999_999_999_999_999_999, 1_000_000_000_000_000_000, Int64.max - 1, Int64.max])
    func integers(value: Int64) throws {
        let text = Array(String(value).utf8)
        for room in 0...21 {
            let result = Self.write(room: room) { $0.write(integer: value) }
            #expect(result.guardIntact && result.fitted == (text.count <= room))
            if result.fitted { #expect(result.bytes == text) }
        }
    }

    @Test("a buffer is left as it was when the output did not fit")
    func bufferUnchangedOnOverflow() {
        var buffer = ByteBuffer(string: "pre")
        // Far more than the few bytes reserved (rounded up to a small capacity) can hold.
        let long = String(repeating: "x", count: 4096)
        let fitted = buffer.writeJSON(reserving: 4) { $0.write(string: long) }
        #expect(!fitted && String(buffer: buffer) == "pre")
    }

    @Test("after a piece does not fit, nothing more is written, even pieces that would")
    func overflowIsFinal() throws {
        let result = Self.write(room: 8) { out in
            out.write("[1,")
            out.write(string: "too long to fit")
            out.write("2]")
        }
        #expect(!result.fitted && result.bytes == Array("[1,".utf8) && result.guardIntact)
    }

    /// Nested values with random strings, numbers and literals.
    static func randomValue(_ generator: inout SeededGenerator, depth: Int = 0) -> JSONValue {
        switch generator.next() % (depth > 2 ? 5 : 7) {
        case 0: return .null
        case 1: return .bool(generator.next() % 2 == 0)
        case 2: return .int(Int64(bitPattern: generator.next()) >> (generator.next() % 64))
        case 3: return .double(Double(Int64(bitPattern: generator.next() >> 12)) / 1000)
        case 4: return .string(randomString(&generator))
        case 5: return .array((0..<Int(generator.next() % 4)).map { _ in randomValue(&generator, depth: depth + 1) })
        default:
            var members: [String: JSONValue] = [:]
            for _ in 0..<Int(generator.next() % 4) { members[randomString(&generator)] = randomValue(&generator, depth: depth + 1) }
            return .object(members)
        }
    }

    @Test("a value that does not fit is counted exactly, so that one more try with that room fits")
    func neededIsExact() {
        var generator = SeededGenerator(state: 42)
        for _ in 0..<300 {
            let value = Self.randomValue(&generator)
            let whole = Self.write(room: 1 << 16) { $0.write(value: value) }
            #expect(whole.fitted && whole.guardIntact)
            for room in Set([0, 1, whole.bytes.count / 2, whole.bytes.count - 1, whole.bytes.count]) where room >= 0 {
                var needed = -1
                let result = Self.write(room: room) { out in
                    out.write(value: value)
                    needed = out.needed
                }
                #expect(result.guardIntact)
                #expect(result.fitted == (room >= whole.bytes.count))
                #expect(needed == whole.bytes.count, "counted \(needed) of \(whole.bytes.count) in \(room) bytes")
                if result.fitted { #expect(result.bytes == whole.bytes) }
            }
        }
    }

    @Test("a one-scalar literal and an empty region write or count without trapping")
    func edgeRegions() {
        // A one-character literal may be stored as a scalar rather than as UTF-8 bytes.
        #expect(Self.write(room: 1) { $0.write("x") }.bytes == [UInt8(ascii: "x")])
        var output = JSONOutput(UnsafeMutableRawBufferPointer(start: nil, count: 0))
        [UInt8]().withUnsafeBytes { output.write(json: $0) }
        output.write("")
        #expect(!output.overflowed && output.count == 0)
        output.write(string: "")
        #expect(output.overflowed && output.needed == 2 && output.count == 0)
    }

    @Test("values: what was written parses back to the same value, members sorted")
    func valuesRoundTrip() throws {
        var generator = SeededGenerator(state: 7)
        for _ in 0..<200 {
            let value = JSONValue.object([
                "b": .string(Self.randomString(&generator)), "a": .int(Int64(bitPattern: generator.next())),
                "c": .array([.double(0.1), .bool(false), .null, .object([Self.randomString(&generator): .int(1)])]),
            ])
            var buffer = ByteBuffer()
            value.write(to: &buffer)
            #expect(try JSONValue.parse(buffer) == value)
            let text = String(buffer: buffer)
            #expect(text.hasPrefix("{\"a\":"), "members not sorted: \(text)")
            #expect(!text.utf8.contains { $0 < 0x20 }, "a raw control character in \(text.debugDescription)")
        }
    }
}

private func String(format byte: UInt8) -> String {
    let digits = Array("0123456789abcdef")
    return "\\u00" + String(digits[Int(byte >> 4)]) + String(digits[Int(byte & 0x0F)])
}
