import KeyholeProtocol
import NIOCore
import Testing

/// A request's `args` is checked with its envelope and read in place (`Request.sentArgs`): what an
/// operation reads that way must be what the general parser's dictionary holds.
@Suite("Arguments read in place")
struct CheckedJSONObjectTests {
    static func request(_ args: String) throws -> Request {
        try Request.parse(ByteBuffer(string: #"{"id":7,"op":"o","args":"# + args + "}"))
    }

    @Test(
        "each member read in place is the general parser's, and so are the count and the whole",
        arguments: [
            #"{}"#, #"{"session":"abc"}"#, #"{ "a" : 1 , "b":[1,{"c":null}], "d":{"e":{"f":"g"}}, "h":-1.5e3 }"#,
            #"{"t":true,"f":false,"n":null,"s":"\"\\\/\b\f\n\r\t\u00e9\ud83d\ude00","i":-9223372036854775808}"#,
            "{" + (0..<20).map { "\"k\($0)\":\($0)" }.joined(separator: ",") + "}",
            // Skipped members that look like ends: backslash runs before quotes, brackets in strings.
            #"{"a":"x\\","b":"\"","c":"\\\"q\\","d":[{"e":"}]\"[{"},[]],"f":1,"g":{},"h":[],"i":-0.5E-3,"j":"end"}"#,
            // Whitespace everywhere, a name escaped, strings next to each other.
            #"{ "a" : 1 , "b" : "x" , "c" : [ ] , "d" : { } , "e" : "y\n" , "\u0066" : null }"#,
            #"{"a":"1","b":"2","c":"3","d":"4"}"#, #"{"a":"1","b":"2","c":"3","d":"4","e":"5"}"#,
        ])
    func sameAsParsed(args: String) throws {
        guard case .object(let expected) = try JSONValue.parse(ByteBuffer(string: args)) else {
            Issue.record("not an object")
            return
        }
        let sent = try #require(try Self.request(args).sentArgs)
        #expect(sent.count == expected.count)
        #expect(sent.dictionary == expected)
        for (name, value) in expected { #expect(sent.value(of: name) == value, "\(name)") }
        #expect(sent.value(of: "absent") == nil)
        #expect(try Self.request(args).args == expected)
    }

    @Test("a name is found by its bytes once unescaped, and only by its whole bytes")
    func names() throws {
        let sent = try #require(try Self.request(#"{"sess\u0069on":"t","se":1,"\u212Aey":2,"café":3}"#).sentArgs)
        #expect(sent.value(of: "session") == "t")
        #expect(sent.value(of: "sess") == nil)
        #expect(sent.value(of: "sessions") == nil)
        #expect(sent.value(of: "se") == 1)
        // U+212A KELVIN SIGN equals "K" as a Swift String, not by its bytes.
        #expect(sent.value(of: "Key") == nil)
        #expect(sent.value(of: "\u{212A}ey") == 2)
        #expect(sent.value(of: "cafe\u{301}") == nil)
        #expect(sent.value(of: "caf\u{E9}") == 3)
    }

    @Test("no args, null args and a request built in code have no arguments in place; other types are refused")
    func absent() throws {
        #expect(try Request.parse(ByteBuffer(string: #"{"op":"o"}"#)).sentArgs == nil)
        #expect(try Request.parse(ByteBuffer(string: #"{"op":"o","args":null}"#)).sentArgs == nil)
        #expect(try Request.parse(ByteBuffer(string: #"{"op":"o","args":null}"#)).args == [:])
        #expect(Request(id: nil, op: "o", args: ["a": 1]).sentArgs == nil)
        for args in ["[]", "1", #""x""#, "true"] {
            #expect(throws: Request.Rejection.self) { try Self.request(args) }
        }
    }

    @Test("an owned request keeps its arguments, and setting args replaces what was sent")
    func ownedAndSet() throws {
        let request = try Self.request(#"{"a":[1,2],"b":"c"}"#)
        let owned = request.owned
        #expect(owned == request)
        #expect(owned.sentArgs?.value(of: "b") == "c")
        #expect(owned.sentArgs?.count == 2)
        var changed = request
        changed.args = ["z": 1]
        #expect(changed.sentArgs == nil)
        #expect(changed.args == ["z": 1])
        #expect(changed != request)
    }

    @Test("invalid UTF-8 in an argument is refused as the general parser refuses it")
    func invalidUTF8() {
        var frame = ByteBuffer(string: #"{"op":"o","args":{"a":""#)
        frame.writeBytes([0xC3, 0x28])
        frame.writeString(#""}}"#)
        do {
            _ = try Request.parse(frame)
            Issue.record("parsed")
        } catch {
            #expect(error.error.code == .badRequest)
            #expect(error.error.message.contains("UTF-8"), "\(error.error.message)")
        }
    }

    @Test("a string member comes as its bytes, unescaped; other values as values")
    func members() throws {
        let sent = try #require(try Self.request(#"{"plain":"kh_x-y","escaped":"a\nb\u00e9","n":null,"o":{"k":"v"}}"#).sentArgs)
        func member(_ name: String) -> CheckedJSONObject.Member? {
            var name = name
            return name.withUTF8 { sent.member(UnsafeRawBufferPointer($0)) }
        }
        guard case .string(let plain)? = member("plain"), case .string(let escaped)? = member("escaped") else {
            Issue.record("strings not found as strings")
            return
        }
        #expect(String(buffer: plain) == "kh_x-y")
        #expect(String(buffer: escaped) == "a\nb\u{E9}")
        guard case .value(.null)? = member("n"), case .value(let object)? = member("o") else {
            Issue.record("other values not found as values")
            return
        }
        #expect(object == ["k": "v"])
        #expect(member("absent") == nil)
    }
}
