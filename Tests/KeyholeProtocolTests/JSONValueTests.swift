import KeyholeProtocol
import NIOCore
import Testing

@Suite("JSONValue")
struct JSONValueTests {
    @Test("serialisation escapes what JSON requires and parses back identically")
    func roundTrip() throws {
        let strings = ["", "plain", "quote\" backslash\\ slash/", "\u{0}\u{1}\u{8}\u{9}\u{A}\u{C}\u{D}\u{1F}", "é ☃ 𝄞", "\u{7F}"]
        for string in strings {
            let value = JSONValue.object(["s": .string(string), "a": [.int(Int64.max), .int(Int64.min), 0.5, -1e300, true, false, nil]])
            var buffer = ByteBuffer()
            value.write(to: &buffer)
            #expect(try JSONValue.parse(buffer) == value, "\(string.debugDescription)")
        }
    }

    @Test("control characters never appear raw in output")
    func noRawControlCharacters() {
        var buffer = ByteBuffer()
        JSONValue.string("a\u{0}b\u{1B}c\nd").write(to: &buffer)
        #expect(!buffer.readableBytesView.contains { $0 < 0x20 })
        #expect(String(buffer: buffer) == #""a\u0000b\u001bc\nd""#)
    }

    @Test("objects serialise with sorted members, so output is deterministic")
    func sortedMembers() {
        #expect(JSONValue.object(["b": 1, "a": 2, "c": ["z": 1, "y": 2]]).jsonText == #"{"a":2,"b":1,"c":{"y":2,"z":1}}"#)
    }

    @Test("members sorted on both paths: small objects ordered on the stack, bigger ones by sorted()",
          arguments: [0, 1, 2, 15, 16, 17, 40])
    func sortedMembersAtEverySize(count: Int) {
        // Zero-padded, so that the keys' sorted order is their numeric order; inserted in reverse.
        let keys = (0..<count).map { n in "k" + String(repeating: "0", count: 3 - String(n).count) + String(n) }
        var members: [String: JSONValue] = [:]
        for key in keys.reversed() { members[key] = .object(["y": .int(1), "x": .string(key)]) }
        let text = JSONValue.object(members).jsonText
        let expected = "{" + keys.map { #""\#($0)":{"x":"\#($0)","y":1}"# }.joined(separator: ",") + "}"
        #expect(text == expected)
    }

    @Test("non-finite numbers become null")
    func nonFinite() {
        #expect(JSONValue.double(.nan).jsonText == "null")
        #expect(JSONValue.double(.infinity).jsonText == "null")
    }

    @Test("integers and fractions are told apart")
    func numbers() throws {
        #expect(try JSONValue.parse(ByteBuffer(string: "42")) == .int(42))
        #expect(try JSONValue.parse(ByteBuffer(string: "4.5")) == .double(4.5))
        #expect(try JSONValue.parse(ByteBuffer(string: "-9223372036854775808")) == .int(.min))
        if case .int = try JSONValue.parse(ByteBuffer(string: "9223372036854775808")) {
            Issue.record("2^63 does not fit in Int64 and must not be read as an integer")
        }
    }

    @Test("invalid input is bad_request")
    func invalid() {
        for bytes: [UInt8] in [[], Array("{".utf8), [0xFF], [0xEF, 0xBB, 0xBF, 0x7B, 0x7D], Array("{} {}".utf8), Array("nul".utf8)] {
            #expect(throws: ProtocolError.badRequest("")) { try JSONValue.parse(ByteBuffer(bytes: bytes)) }
        }
    }

    @Test("integers are written in decimal exactly as Swift prints them", arguments: [
        0, 7, -7, 9, 10, -10, 99, 100, 1_234_567_890, 1_800_000_000_000, Int64.max, Int64.min, Int64.min + 1,
    ] as [Int64])
    func integers(value: Int64) {
        var buffer = ByteBuffer()
        JSONValue.writeInteger(value, to: &buffer)
        #expect(String(buffer: buffer) == String(value))
        #expect(JSONValue.int(value).jsonText == String(value))
    }

    @Test("parsing an array of bytes gives what parsing a ByteBuffer of them gives, refusals included")
    func parseBytes() throws {
        for text in [#"{"a":[1,2.5,"x"],"b":{"c":null}}"#, #"{"a":1,"a":2}"#, "[1,", #""\u00e9""#, ""] {
            let fromBuffer = Result { () throws(ProtocolError) in try JSONValue.parse(ByteBuffer(string: text)) }
            let fromBytes = Result { () throws(ProtocolError) in try JSONValue.parse(bytes: Array(text.utf8)) }
            switch (fromBuffer, fromBytes) {
            case (.success(let a), .success(let b)): #expect(a == b)
            case (.failure(let a), .failure(let b)): #expect(a.message == b.message && a.code == b.code)
            default: Issue.record("\(text): \(fromBuffer) against \(fromBytes)")
            }
        }
        #expect(try JSONValue.parse(bytes: Array(#"{"k":"v"}"#.utf8)) == ["k": "v"])
    }
}
