import KeyholeProtocol
import NIOCore
import KeyholeTestSupport
import Testing

@Suite("JSONParser")
struct JSONParserTests {
    static func parse(_ text: String) throws(ProtocolError) -> JSONValue {
        try JSONValue.parse(ByteBuffer(string: text))
    }

    static func parse(_ bytes: [UInt8]) throws(ProtocolError) -> JSONValue {
        try JSONValue.parse(ByteBuffer(bytes: bytes))
    }

    static func serialise(_ value: JSONValue) -> ByteBuffer {
        var buffer = ByteBuffer()
        value.write(to: &buffer)
        return buffer
    }

    // MARK: - Accepted documents

    @Test(
        "accepted documents parse to exactly the expected value",
        arguments: [
            ("null", JSONValue.null),
            ("true", .bool(true)),
            ("false", .bool(false)),
            ("0", .int(0)),
            ("-0", .int(0)),
            ("42", .int(42)),
            ("-17", .int(-17)),
            ("9223372036854775807", .int(.max)),
            ("-9223372036854775808", .int(.min)),
            ("9223372036854775808", .double(9_223_372_036_854_775_808.0)),
            ("-9223372036854775809", .double(-9_223_372_036_854_775_809.0)),
            ("18446744073709551616", .double(18_446_744_073_709_551_616.0)),
            ("123456789012345678901234567890", .double(1.2345678901234568e29)),
            ("1.0", .double(1)),
            ("1e2", .double(100)),
            ("1E2", .double(100)),
            ("1e+2", .double(100)),
            ("1e-2", .double(0.01)),
            ("-1.5E-3", .double(-0.0015)),
            ("0.5", .double(0.5)),
            ("-0.0", .double(-0.0)),
            ("0e0", .double(0)),
            ("2.5e007", .double(25_000_000)),
            ("1e-400", .double(0)),
            ("1.7976931348623157e308", .double(.greatestFiniteMagnitude)),
            ("4.9e-324", .double(.leastNonzeroMagnitude)),
            (#""""#, .string("")),
            (#""plain ascii""#, .string("plain ascii")),
            (#""é ☃ 𝄞""#, .string("é ☃ 𝄞")),
            (#""\"\\\/\b\f\n\r\t""#, .string("\"\\/\u{8}\u{C}\n\r\t")),
            (#""\u0041\u00e9\u2603\uFFFF""#, .string("Aé☃\u{FFFF}")),
            (#""\u0000nul""#, .string("\u{0}nul")),
            (#""\uD83D\uDE00""#, .string("😀")),
            (#""a\ud834\udd1eb""#, .string("a𝄞b")),
            (#""\uDBFF\uDFFF""#, .string("\u{10FFFF}")),
            (#""mixed é\n\u00e9 😀\uD83D\uDE00""#, .string("mixed é\né 😀😀")),
            ("[]", .array([])),
            ("{}", .object([:])),
            (" \t\r\n[ 1 , \"a\" , null ]\n\r\t ", .array([1, "a", nil])),
            (
                #"{"op":"ping","id":12345}"#,
                .object(["op": "ping", "id": 12345])
            ),
            (
                #"{"a":[1,{"b":[true,false,null,{}],"c":[[]]}],"d":{"e":{"f":-2.5}},"":""}"#,
                .object(["a": [1, ["b": [true, false, nil, [:]], "c": [[]]]], "d": ["e": ["f": -2.5]], "": ""])
            ),
            (#"{"\u006Fp":1,"o\u0070x":2}"#, .object(["op": 1, "opx": 2])),
        ] as [(String, JSONValue)]
    )
    func accepted(text: String, expected: JSONValue) throws {
        let value = try Self.parse(text)
        #expect(value == expected)
        // `==` on doubles does not tell 0.0 from -0.0, nor does it check the case: compare both.
        switch (value, expected) {
        case (.double(let parsed), .double(let wanted)):
            #expect(parsed.bitPattern == wanted.bitPattern)
        case (.int, .int), (.null, .null), (.bool, .bool), (.string, .string), (.array, .array), (.object, .object):
            break
        default:
            Issue.record("\(text) parsed as \(value), expected \(expected)")
        }
    }

    /// Strings are scanned eight bytes at a time while the bytes are plain: a special byte at any offset
    /// of a word, in strings of every length around the word size, must still be seen.
    @Test("a quote, an escape, a control character or UTF-8 at every offset of a long string is read as one by one")
    func specialByteAtEveryOffset() throws {
        let specials: [(raw: [UInt8], decoded: String?)] = [
            (Array(#"\""#.utf8), "\""), (Array(#"\\"#.utf8), "\\"), (Array(#"\n"#.utf8), "\n"),
            (Array(#"\u00e9"#.utf8), "é"), (Array("é".utf8), "é"), (Array("😀".utf8), "😀"),
            ([0x01], nil), ([0xFF], nil), ([0xC3], nil),
        ]
        for length in [0, 1, 7, 8, 9, 15, 16, 17, 31, 40] {
            for offset in 0...length {
                for special in specials {
                    let before = Array(repeating: UInt8(ascii: "a"), count: offset)
                    let after = Array(repeating: UInt8(ascii: "b"), count: length - offset)
                    let document = [UInt8(ascii: "\"")] + before + special.raw + after + [UInt8(ascii: "\"")]
                    let parsed = try? Self.parse(document)
                    if let decoded = special.decoded {
                        let expected = String(decoding: before, as: UTF8.self) + decoded + String(decoding: after, as: UTF8.self)
                        #expect(parsed == .string(expected), "length \(length), offset \(offset), \(special.raw)")
                    } else {
                        #expect(parsed == nil, "length \(length), offset \(offset), \(special.raw) must be refused")
                    }
                }
            }
        }
        // And a string cut short inside a plain run is unterminated, never read past its end.
        #expect((try? Self.parse(Array(("\"" + String(repeating: "x", count: 23)).utf8))) == nil)
    }

    /// A word with a special byte in it moves the scan straight to its first special byte: with a
    /// second one (the closing quote) in the same word, the first must still be the one read.
    @Test("two special bytes in one word of a string: the first is read first")
    func twoSpecialBytesInOneWord() throws {
        let firsts: [(raw: [UInt8], decoded: String?)] = [
            ([0x01], nil), ([0x1F], nil), ([0xFF], nil), ([0x80], nil), (Array(#"\n"#.utf8), "\n"), (Array("é".utf8), "é"),
        ]
        for offset in 0..<8 {
            for gap in 0..<7 {
                for first in firsts {
                    let before = String(repeating: "a", count: offset), after = String(repeating: "b", count: gap)
                    // The closing quote lies in the same word as the first special byte, and the text
                    // goes on past it, so that the scan reads them as one word.
                    let document = Array("[\"\(before)".utf8) + first.raw + Array("\(after)\",\"\(String(repeating: "c", count: 16))\"]".utf8)
                    let parsed = try? Self.parse(document)
                    if let decoded = first.decoded {
                        let expected = before + decoded + after
                        #expect(parsed == .array([.string(expected), .string(String(repeating: "c", count: 16))]), "offset \(offset), gap \(gap), \(first.raw)")
                    } else {
                        #expect(parsed == nil, "offset \(offset), gap \(gap), \(first.raw) must be refused")
                    }
                }
            }
        }
    }

    @Test("a request id written as 1.0 is a double, so it is not a valid id")
    func floatID() throws {
        let value = try Self.parse(#"{"id":1.0,"op":"ping"}"#)
        #expect(value["id"] == .double(1))
        #expect(value["id"]?.intValue == nil)
        #expect(throws: Request.Rejection.self) { try Request.parse(ByteBuffer(string: #"{"id":1.0,"op":"ping"}"#)) }
        #expect(try Request.parse(ByteBuffer(string: #"{"id":1,"op":"ping"}"#)).id == .int(1))
    }

    @Test("nesting of exactly 64 arrays and objects is accepted")
    func maximumDepth() throws {
        var text = String(repeating: "[", count: 64) + String(repeating: "]", count: 64)
        var expected = JSONValue.array([])
        for _ in 1..<64 { expected = .array([expected]) }
        #expect(try Self.parse(text) == expected)

        text = String(repeating: #"{"a":["#, count: 32) + "7" + String(repeating: "]}", count: 32)
        expected = 7
        for _ in 0..<32 { expected = ["a": [expected]] }
        #expect(try Self.parse(text) == expected)
    }

    // MARK: - Rejected documents

    static let rejectedDocuments: [(String, [UInt8])] = [
        ("empty input", []),
        ("only whitespace", Array(" \n\t\r".utf8)),
        ("byte order mark", [0xEF, 0xBB, 0xBF] + Array("{}".utf8)),
        ("trailing comma in array", Array("[1,]".utf8)),
        ("trailing comma in object", Array(#"{"a":1,}"#.utf8)),
        ("leading comma", Array("[,1]".utf8)),
        ("missing comma", Array("[1 2]".utf8)),
        ("missing colon", Array(#"{"a" 1}"#.utf8)),
        ("missing value", Array(#"{"a":}"#.utf8)),
        ("unquoted key", Array("{a:1}".utf8)),
        ("single quotes", Array("['a']".utf8)),
        ("line comment", Array("[1] // c".utf8)),
        ("block comment", Array("[1,/* c */2]".utf8)),
        ("leading zero", Array("01".utf8)),
        ("negative leading zero", Array("-01".utf8)),
        ("leading plus", Array("+1".utf8)),
        ("no integer part", Array(".5".utf8)),
        ("no fraction digits", Array("5.".utf8)),
        ("no exponent digits", Array("1e".utf8)),
        ("signed empty exponent", Array("1e+".utf8)),
        ("lone minus", Array("-".utf8)),
        ("hex number", Array("0x1F".utf8)),
        ("NaN", Array("NaN".utf8)),
        ("Infinity", Array("-Infinity".utf8)),
        ("overflowing double", Array("1e400".utf8)),
        ("overflowing negative double", Array("-1e400".utf8)),
        ("truncated literal", Array("nul".utf8)),
        ("misspelt literal", Array("True".utf8)),
        ("literal with trailing letters", Array("truex".utf8)),
        ("lone high surrogate", Array(#""\uD83D""#.utf8)),
        ("lone low surrogate", Array(#""\uDE00""#.utf8)),
        ("reversed surrogates", Array(#""\uDE00\uD83D""#.utf8)),
        ("high surrogate then other escape", Array(#""\uD83D\n""#.utf8)),
        ("two high surrogates", Array(#""\uD83D\uD83D""#.utf8)),
        ("short unicode escape", Array(#""\u12""#.utf8)),
        ("non-hex unicode escape", Array(#""\u12G4""#.utf8)),
        ("unknown escape", Array(#""\x41""#.utf8)),
        ("escaped single quote", Array(#""\'""#.utf8)),
        ("byte FF", [0x22, 0xFF, 0x22]),
        ("byte FF outside a string", [0xFF]),
        ("overlong NUL C0 80", [0x22, 0xC0, 0x80, 0x22]),
        ("overlong E0 80 AF", [0x22, 0xE0, 0x80, 0xAF, 0x22]),
        ("UTF-8 encoded surrogate ED A0 80", [0x22, 0xED, 0xA0, 0x80, 0x22]),
        ("above U+10FFFF F4 90 80 80", [0x22, 0xF4, 0x90, 0x80, 0x80, 0x22]),
        ("lone continuation byte", [0x22, 0x80, 0x22]),
        ("truncated two-byte sequence", [0x22, 0xC3, 0x22]),
        ("truncated three-byte sequence at the end", [0x22, 0xE2, 0x82]),
        ("truncated four-byte sequence", [0x22, 0xF0, 0x9F, 0x98, 0x22]),
        ("raw control character in a string", Array("\"a\u{1}b\"".utf8)),
        ("raw newline in a string", Array("\"a\nb\"".utf8)),
        ("raw tab in a string", Array("\"a\tb\"".utf8)),
        ("unterminated string", Array(#"{"a":"b}"#.utf8)),
        ("string ending in a backslash", Array(#""ab\"#.utf8)),
        ("unterminated array", Array("[1,2".utf8)),
        ("unterminated object", Array(#"{"a":1"#.utf8)),
        ("unterminated empty object", Array("{".utf8)),
        ("mismatched brackets", Array("[1}".utf8)),
        ("trailing garbage", Array("{} x".utf8)),
        ("two values", Array("{}{}".utf8)),
        ("trailing NUL", Array("{}".utf8) + [0]),
        ("vertical tab as whitespace", Array("\u{B}1".utf8)),
        ("non-breaking space as whitespace", Array("\u{A0}1".utf8)),
        ("depth 65", Array((String(repeating: "[", count: 65) + String(repeating: "]", count: 65)).utf8)),
        ("depth 65 in objects", Array((String(repeating: #"{"a":"#, count: 65) + "1" + String(repeating: "}", count: 65)).utf8)),
        ("huge depth", Array(String(repeating: "[", count: 100_000).utf8)),
        ("duplicate key", Array(#"{"a":1,"a":2}"#.utf8)),
        ("duplicate key after unescaping", Array(#"{"a":1,"\u0061":1}"#.utf8)),
        ("duplicate key in a nested object", Array(#"[{"op":"x","id":1,"op":"y"}]"#.utf8)),
    ]

    @Test("invalid documents are bad_request", arguments: rejectedDocuments)
    func rejected(name: String, bytes: [UInt8]) {
        #expect(throws: ProtocolError.badRequest(""), "\(name)") { try Self.parse(bytes) }
    }

    @Test("error messages say what is wrong and where, and never quote the payload")
    func messages() {
        func message(_ bytes: [UInt8]) -> String? {
            do {
                _ = try Self.parse(bytes)
                return nil
            } catch {
                #expect(error.code == .badRequest)
                return error.message
            }
        }
        #expect(message(Array(#"{"secret" 1}"#.utf8)) == "invalid JSON at byte 10: expected ':'")
        #expect(message(Array("".utf8)) == "invalid JSON at byte 0: unexpected end of input, expected a value")
        #expect(message(Array("[1,]".utf8)) == "invalid JSON at byte 3: expected a value")
        #expect(message(Array("{} x".utf8)) == "invalid JSON at byte 3: unexpected data after the JSON value")
        #expect(message(Array("[1,2".utf8)) == "invalid JSON at byte 4: unexpected end of input, expected ',' or ']'")
        #expect(message(Array("012".utf8)) == "invalid JSON at byte 0: number has a leading zero")
        #expect(message(Array("[1e400]".utf8)) == "invalid JSON at byte 1: number is too large")
        #expect(message(Array(#"["x","\uD800"]"#.utf8)) == "invalid JSON at byte 6: unpaired UTF-16 surrogate in \\u escape")
        #expect(message(Array(#"  "abc"#.utf8)) == "invalid JSON at byte 2: unterminated string")
        #expect(message([0x22, 0x61, 0xC0, 0x80, 0x22]) == "payload is not valid UTF-8 at byte 2")
        #expect(message([0xEF, 0xBB, 0xBF, 0x7B, 0x7D]) == "payload starts with a byte order mark")
        #expect(message(Array((String(repeating: "[", count: 70)).utf8)) == "invalid JSON at byte 64: nesting deeper than 64 levels")
        #expect(message(Array(#"{"op":1,"op":2}"#.utf8)) == "invalid JSON at byte 8: duplicate member 'op'")

        let longName = String(repeating: "k", count: 200)
        let duplicate = message(Array(#"{"\#(longName)":1,"\#(longName)":2}"#.utf8))
        #expect(duplicate == "invalid JSON at byte 206: duplicate member '\(String(repeating: "k", count: 64))...'")
        #expect(message(Array(#"{"a\u0000\n":1,"a\u0000\n":2}"#.utf8)) == "invalid JSON at byte 15: duplicate member 'a\u{FFFD}\u{FFFD}'")
    }

    // MARK: - Differential and robustness tests

    static func randomString(_ generator: inout SeededGenerator) -> String {
        let pool: [Unicode.Scalar] = [
            "a", "z", "Q", "0", " ", "\"", "\\", "/", "\u{0}", "\u{1}", "\u{8}", "\u{9}", "\u{A}", "\u{C}", "\u{D}",
            "\u{1F}", "\u{7F}", "é", "\u{80}", "\u{7FF}", "\u{800}", "☃", "\u{D7FF}", "\u{E000}", "\u{FFFD}", "\u{FFFF}",
            "\u{10000}", "😀", "𝄞", "\u{10FFFF}",
        ]
        let length = Int.random(in: 0...12, using: &generator)
        var scalars = String.UnicodeScalarView()
        for _ in 0..<length { scalars.append(pool.randomElement(using: &generator)!) }
        return String(scalars)
    }

    /// A double that `write(to:)` writes with a fraction or an exponent, so that it reads back as a double.
    static func randomDouble(_ generator: inout SeededGenerator) -> Double {
        while true {
            let value: Double
            switch Int.random(in: 0..<4, using: &generator) {
            case 0: value = Double.random(in: -1000...1000, using: &generator)
            case 1: value = Double(bitPattern: generator.next())
            case 2: value = Double(Int.random(in: -99999...99999, using: &generator)) / 100
            default: value = Double(sign: .plus, exponentBitPattern: UInt.random(in: 1...2046, using: &generator), significandBitPattern: generator.next() & 0xF_FFFF_FFFF_FFFF)
            }
            if value.isFinite && !(value == value.rounded() && abs(value) < 1e15) { return value }
        }
    }

    static func randomValue(_ generator: inout SeededGenerator, depth: Int) -> JSONValue {
        let kind = depth >= 6 ? Int.random(in: 0..<5, using: &generator) : Int.random(in: 0..<7, using: &generator)
        switch kind {
        case 0: return .null
        case 1: return .bool(Bool.random(using: &generator))
        case 2:
            switch Int.random(in: 0..<4, using: &generator) {
            case 0: return .int(Int64.random(in: -10...10, using: &generator))
            case 1: return .int([Int64.min, Int64.max, Int64.min + 1, Int64.max - 1, 0].randomElement(using: &generator)!)
            default: return .int(Int64(bitPattern: generator.next()))
            }
        case 3: return .double(randomDouble(&generator))
        case 4: return .string(randomString(&generator))
        case 5:
            return .array((0..<Int.random(in: 0...5, using: &generator)).map { _ in randomValue(&generator, depth: depth + 1) })
        default:
            var members: [String: JSONValue] = [:]
            for _ in 0..<Int.random(in: 0...5, using: &generator) {
                members[randomString(&generator)] = randomValue(&generator, depth: depth + 1)
            }
            return .object(members)
        }
    }

    @Test("parsing what write(to:) wrote gives back the same value")
    func differential() throws {
        var generator = SeededGenerator(state: 0x4B45_5948_4F4C_45)
        for round in 0..<500 {
            let value = Self.randomValue(&generator, depth: 0)
            let buffer = Self.serialise(value)
            #expect(try JSONValue.parse(buffer) == value, "round \(round): \(String(buffer: buffer))")
        }
    }

    static let documents: [String] = [
        #"{"op":"ping","id":12345}"#,
        #"{"v":1,"id":"req-α","op":"kv.set","args":{"key":"a\"b\\c\u00e9\uD83D\uDE00","value":[1,-2.5e-3,true,false,null,{}],"n":-0}}"#,
        " [ {\"a\" : [ [ ] , { } ] } , \"é☃𝄞\" , 1E+2 , 0.5 , -9223372036854775808 ] ",
        #""\u0000\b\f\n\r\t\/""#,
    ]

    @Test("truncated and mutated documents return or throw, and whatever is accepted round-trips")
    func robustness() throws {
        var inputs: [[UInt8]] = []
        for document in Self.documents {
            let bytes = Array(document.utf8)
            for length in 0...bytes.count { inputs.append(Array(bytes[..<length])) }
        }
        var generator = SeededGenerator(state: 0x5EED)
        let interesting: [UInt8] = [
            0x00, 0x09, 0x0A, 0x20, 0x22, 0x2C, 0x2D, 0x2E, 0x30, 0x31, 0x3A, 0x45, 0x5B, 0x5C, 0x5D, 0x65, 0x75, 0x7B, 0x7D,
            0x7F, 0x80, 0xBF, 0xC0, 0xC2, 0xE0, 0xED, 0xEF, 0xF0, 0xF4, 0xF5, 0xFF,
        ]
        for _ in 0..<4000 {
            var bytes = Array(Self.documents.randomElement(using: &generator)!.utf8)
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                let position = Int.random(in: 0..<bytes.count, using: &generator)
                let byte = Bool.random(using: &generator) ? interesting.randomElement(using: &generator)! : UInt8.random(in: 0...255, using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: bytes[position] = byte
                case 1: bytes.insert(byte, at: position)
                default: if bytes.count > 1 { bytes.remove(at: position) }
                }
            }
            inputs.append(bytes)
        }
        var accepted = 0
        for input in inputs {
            let value: JSONValue
            do {
                value = try Self.parse(input)
            } catch {
                #expect(error.code == .badRequest)
                continue
            }
            accepted += 1
            // Anything accepted must be valid UTF-8.
            #expect(String(validating: input, as: UTF8.self) != nil)
            let reparsed = try JSONValue.parse(Self.serialise(value))
            // write(to:) writes integral doubles below 1e15 as integers, so compare numbers by value.
            #expect(Self.sameNumbers(reparsed, value), "\(input)")
        }
        // The unmutated documents are among the inputs, so some inputs must be accepted.
        #expect(accepted >= Self.documents.count)
    }

    /// Equality, except that an integer and a double of the same value count as equal.
    static func sameNumbers(_ lhs: JSONValue, _ rhs: JSONValue) -> Bool {
        switch (lhs, rhs) {
        case (.int(let int), .double(let double)), (.double(let double), .int(let int)):
            return Double(int) == double
        case (.array(let left), .array(let right)):
            return left.count == right.count && zip(left, right).allSatisfy { sameNumbers($0, $1) }
        case (.object(let left), .object(let right)):
            return left.count == right.count && left.allSatisfy { key, value in right[key].map { sameNumbers(value, $0) } ?? false }
        default:
            return lhs == rhs
        }
    }

    // MARK: - Benchmark

    @Test("benchmark: parse the ping request 1,000,000 times", .disabled("benchmark"))
    func benchmark() throws {
        let buffer = ByteBuffer(string: #"{"op":"ping","id":12345}"#)
        let iterations = 1_000_000
        var count = 0
        let clock = ContinuousClock()
        let elapsed = try clock.measure {
            for _ in 0..<iterations {
                if case .object(let members) = try JSONValue.parse(buffer) { count &+= members.count }
            }
        }
        let nanoseconds = Double(elapsed.components.seconds) * 1e9 + Double(elapsed.components.attoseconds) / 1e9
        print("BENCH ping parse: \(nanoseconds / Double(iterations)) ns per request over \(iterations)")
        #expect(count == 2 * iterations)
    }
}
