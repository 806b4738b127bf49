import KeyholeProtocol
import NIOCore
import Testing

@Suite("operation names, looked up by their bytes")
struct OperationNamesTests {
    static let operations = OperationNames(["ping", "session.get", "session.create", "apple.transfer.export", "Key", "ping"])

    static func index(_ name: String) -> Int? {
        var bytes = Array(name.utf8)
        return bytes.withUnsafeMutableBytes { operations.index(of: UnsafeRawBufferPointer($0)) }
    }

    @Test("every name is found at its index, by its bytes and by its string; a repeat is kept once")
    func found() {
        #expect(Self.operations.names == ["ping", "session.get", "session.create", "apple.transfer.export", "Key"])
        for (index, name) in Self.operations.names.enumerated() {
            #expect(Self.index(name) == index)
            #expect(Self.operations.index(of: name) == index)
            #expect(Self.operations.name(at: index) == name)
        }
    }

    @Test("anything but a name's whole bytes is not found: prefixes, longer, case, canonically equal text")
    func notFound() {
        for name in ["", "pin", "ping ", " ping", "PING", "session.ge", "session.gett", "session_get", "\u{212A}ey", "K\u{65}y\u{301}"] {
            #expect(Self.index(name) == nil, "\(name)")
            #expect(Self.operations.index(of: name) == nil, "\(name)")
        }
        #expect(OperationNames([]).index(of: "ping") == nil)
    }

    @Test("an empty name is a name like any other, and a table of none finds nothing")
    func emptyName() {
        let table = OperationNames(["", "a"])
        #expect(table.index(of: "") == 0 && table.name(at: 0) == "")
        #expect(table.index(of: "a") == 1 && table.name(at: 1) == "a")
        #expect(OperationNames([]).index(of: "") == nil)
    }

    @Test("hundreds of names, colliding in the table, are each found")
    func many() {
        let names = (0..<500).map { "op.\($0 * 7919 % 1000)" }
        let table = OperationNames(names)
        for (index, name) in names.enumerated() {
            #expect(table.index(of: name) == index)
            #expect(table.name(at: index) == name)
        }
        #expect(table.index(of: "op.1000") == nil)
    }

    @Test("a request's op is found by its bytes, escaped or not; an unknown one keeps its text")
    func parsedWithOperations() throws {
        let plain = try Request.parse(ByteBuffer(string: #"{"id":1,"op":"session.get","args":{"session":"x"}}"#), operations: Self.operations)
        #expect(plain.op == "session.get")
        #expect(plain.operationIndex == 1)
        let escaped = try Request.parse(ByteBuffer(string: #"{"op":"session\u002eget"}"#), operations: Self.operations)
        #expect(escaped.op == "session.get")
        #expect(escaped.operationIndex == 1)
        let unknown = try Request.parse(ByteBuffer(string: #"{"op":"session.gone"}"#), operations: Self.operations)
        #expect(unknown.op == "session.gone")
        #expect(unknown.operationIndex == nil)
        // A Kelvin sign is not a "K", though Swift's strings compare them equal.
        let kelvin = try Request.parse(ByteBuffer(string: "{\"op\":\"\u{212A}ey\"}"), operations: Self.operations)
        #expect(kelvin.operationIndex == nil)
        #expect(Array(kelvin.op.utf8) == Array("\u{212A}ey".utf8))
        // Without a table, and once op is set, there is no index.
        #expect(try Request.parse(ByteBuffer(string: #"{"op":"ping"}"#)).operationIndex == nil)
        var changed = plain
        changed.op = "ping"
        #expect(changed.operationIndex == nil)
    }

    @Test("an op that is not a string, or given twice, is refused as before")
    func refused() {
        for (text, message) in [
            (#"{"id":7,"op":5}"#, "'op' must be present and a string"),
            (#"{"id":7,"op":{"a":[1,2]}}"#, "'op' must be present and a string"),
            (#"{"id":7}"#, "'op' must be present and a string"),
        ] {
            let error = #expect(throws: Request.Rejection.self) { try Request.parse(ByteBuffer(string: text), operations: Self.operations) }
            #expect(error?.error.message == message)
            #expect(error?.id == .int(7))
        }
        do {
            _ = try Request.parse(ByteBuffer(string: #"{"op":"ping","op":"ping"}"#), operations: Self.operations)
            Issue.record("a repeated op was taken")
        } catch {
            #expect(error.error.message.contains("duplicate member 'op'"))
        }
    }
}

@Suite("repeated names in args, found by bytes while they are plain ASCII")
struct ArgumentNameRepeatTests {
    static func message(_ args: String) -> String? {
        do {
            _ = try Request.parse(ByteBuffer(string: #"{"op":"ping","args":"# + args + "}"))
            return nil
        } catch {
            return error.error.message
        }
    }

    @Test("a repeat is refused whether the names stay in place, move to strings, or match only as strings")
    func repeats() {
        let eight = (0..<8).map { "\"n\($0)\":1" }.joined(separator: ",")
        #expect(Self.message("{\(eight)}") == nil)
        #expect(Self.message("{\(eight),\"n8\":1}") == nil)
        #expect(Self.message(#"{"a":1,"b":2,"a":3}"#)?.contains("duplicate member 'a'") == true)
        // The ninth name moves them all into the set: the first is still a repeat.
        #expect(Self.message("{\(eight),\"n8\":1,\"n0\":2}")?.contains("duplicate member 'n0'") == true)
        // An escaped or a non-ASCII name moves them too.
        #expect(Self.message(#"{"a":1,"\u0061":2}"#)?.contains("duplicate member 'a'") == true)
        #expect(Self.message(#"{"\u0061":1,"a":2}"#)?.contains("duplicate member 'a'") == true)
        #expect(Self.message("{\"K\":1,\"\u{212A}\":2}")?.contains("duplicate member") == true)
        #expect(Self.message("{\"\u{E9}\":1,\"e\u{301}\":2}")?.contains("duplicate member") == true)
        #expect(Self.message("{\"\u{E9}\":1,\"e\":2,\"x\":3}") == nil)
        // The general parser refuses the same.
        for args in [#"{"a":1,"\u0061":2}"#, "{\"K\":1,\"\u{212A}\":2}", "{\(eight),\"n8\":1,\"n0\":2}"] {
            #expect(throws: (any Error).self) { try JSONValue.parse(ByteBuffer(string: args)) }
        }
    }
}
