import KeyholeProtocol
import NIOCore
import Testing

@testable import KeyholeServer

/// Reading `args`: types, bounds, and members nobody read.
@Suite("Arguments")
struct ArgumentsTests {
    /// `members` as a request built in code (`inPlace` false) or read from a frame, whose
    /// arguments are read in place (`Request.sentArgs`).
    static func arguments(_ inPlace: Bool, _ members: [String: JSONValue]) -> Arguments {
        let request = Request(id: nil, op: "test", args: members)
        guard inPlace else { return Arguments(request) }
        var frame = ByteBuffer()
        request.write(to: &frame)
        let sent = try! Request.parse(frame)
        precondition(members.isEmpty || sent.sentArgs != nil)
        return Arguments(sent)
    }

    @Test("members read, absent or null, pass finish", arguments: [false, true])
    func allRead(inPlace: Bool) throws {
        var arguments = Self.arguments(inPlace, ["sub": .string("u1"), "ttl_s": .int(120), "data": .null])
        #expect(try arguments.string("sub") == "u1")
        #expect(try arguments.string("issuer") == nil)
        #expect(try arguments.int("ttl_s", in: 60...3600) == 120)
        #expect(try arguments.int("idle_s", in: 60...3600) == nil)
        #expect(arguments.value("data") == .some(.null))
        try arguments.finish()
    }

    @Test("no args at all pass finish", arguments: [false, true])
    func empty(inPlace: Bool) throws {
        var arguments = Self.arguments(inPlace, [:])
        #expect(try arguments.string("sub") == nil)
        try arguments.finish()
    }

    @Test("the first member in sorted order that nobody read is named", arguments: [false, true])
    func unknownNamed(inPlace: Bool) throws {
        var arguments = Self.arguments(inPlace, ["sub": .string("u1"), "zeta": .int(1), "beta": .bool(true)])
        _ = try arguments.string("sub")
        _ = try arguments.string("issuer")
        let error = #expect(throws: ProtocolError.self) { try arguments.finish() }
        #expect(error?.code == ProtocolError.badRequest("").code)
        #expect(error?.message == "unknown argument 'beta'")
    }

    @Test("an unknown member is found even when as many names were read as members sent", arguments: [false, true])
    func unknownWithAbsentReads(inPlace: Bool) throws {
        var arguments = Self.arguments(inPlace, ["sub": .string("u1"), "typo": .int(1)])
        _ = try arguments.string("sub")
        _ = try arguments.string("issuer")
        let error = #expect(throws: ProtocolError.self) { try arguments.finish() }
        #expect(error?.message == "unknown argument 'typo'")
    }

    @Test("wrong types and bounds are bad_request naming the member", arguments: [false, true])
    func typesAndBounds(inPlace: Bool) throws {
        var arguments = Self.arguments(inPlace, ["sub": .int(1), "ttl_s": .int(5), "name": .string("")])
        #expect(throws: ProtocolError.self) { try arguments.string("sub") }
        let bound = #expect(throws: ProtocolError.self) { try arguments.int("ttl_s", in: 60...3600) }
        #expect(bound?.message == "'ttl_s' must be from 60 to 3600")
        let empty = #expect(throws: ProtocolError.self) { try arguments.string("name", maxBytes: 10) }
        #expect(empty?.message == "'name' must be 1 to 10 bytes long")
    }

    @Test("a name read twice counts once, so it cannot hide an unknown member", arguments: [false, true])
    func readTwice(inPlace: Bool) throws {
        var arguments = Self.arguments(inPlace, ["sub": .string("u1"), "typo": .int(1)])
        _ = try arguments.string("sub")
        _ = try arguments.string("sub")
        let error = #expect(throws: ProtocolError.self) { try arguments.finish() }
        #expect(error?.message == "unknown argument 'typo'")
    }

    @Test("once every member sent was found, other names are absent and the names found still read", arguments: [false, true])
    func allFound(inPlace: Bool) throws {
        var arguments = Self.arguments(inPlace, ["token": .string("t1"), "ttl_s": .int(120)])
        #expect(try arguments.string("token") == "t1")
        #expect(try arguments.string("issuer") == nil)
        #expect(try arguments.int("ttl_s", in: 60...3600) == 120)
        // Every member found: names not read before are absent, names read before keep their values.
        #expect(try arguments.string("audience") == nil)
        #expect(arguments.value("nonce") == nil)
        #expect(try arguments.anyStringBytes("token") == ByteBuffer(string: "t1"))
        #expect(try arguments.int("ttl_s", in: 60...3600) == 120)
        #expect(try arguments.stringBytes("token") == ByteBuffer(string: "t1"))
        try arguments.finish()
    }

    @Test("a name sent escaped is found by its decoded bytes, and counts toward every member found")
    func escapedName() throws {
        // Written by hand: \u0074oken is "token".
        let frame = ByteBuffer(string: #"{"op":"test","args":{"\u0074oken":"t1","ttl_s":120}}"#)
        var arguments = Arguments(try Request.parse(frame))
        #expect(try arguments.string("token") == "t1")
        #expect(try arguments.int("ttl_s", in: 60...3600) == 120)
        #expect(try arguments.string("issuer") == nil)
        try arguments.finish()
        // And one more member than was read is still refused by name.
        let extra = ByteBuffer(string: #"{"op":"test","args":{"\u0074oken":"t1","ttl_s":120,"t\u0079po":1}}"#)
        var more = Arguments(try Request.parse(extra))
        _ = try more.string("token")
        _ = try more.int("ttl_s", in: 60...3600)
        _ = try more.string("issuer")
        let error = #expect(throws: ProtocolError.self) { try more.finish() }
        #expect(error?.message == "unknown argument 'typo'")
    }

    @Test("one-letter names (literals kept as a scalar, not as bytes) are told apart and counted once", arguments: [false, true])
    func oneLetterNames(inPlace: Bool) throws {
        var arguments = Self.arguments(inPlace, ["a": .int(1), "b": .int(2), "typo": .int(3)])
        #expect(arguments.value("a") == .int(1))
        #expect(arguments.value("a") == .int(1))
        #expect(arguments.value("c") == nil)
        #expect(arguments.value("b") == .int(2))
        let error = #expect(throws: ProtocolError.self) { try arguments.finish() }
        #expect(error?.message == "unknown argument 'typo'")
    }

    @Test("more than eight names are tracked too", arguments: [false, true])
    func manyNames(inPlace: Bool) throws {
        // Names read are the operations' literals.
        let names: [StaticString] = ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11"]
        var members: [String: JSONValue] = [:]
        for name in names { members[name.description] = .int(1) }
        var all = Self.arguments(inPlace, members)
        for name in names { _ = all.value(name) }
        try all.finish()
        members["zz"] = .int(2)
        var oneUnknown = Self.arguments(inPlace, members)
        for name in names { _ = oneUnknown.value(name) }
        let error = #expect(throws: ProtocolError.self) { try oneUnknown.finish() }
        #expect(error?.message == "unknown argument 'zz'")
    }

    @Test("seventy members are tracked too, each once however often it is read", arguments: [false, true])
    func seventyMembers(inPlace: Bool) throws {
        // Names read are the operations' literals; sent sorted, so "n69" is the 70th member.
        let names: [StaticString] = ["n00", "n01", "n02", "n03", "n04", "n05", "n06", "n07", "n08", "n09", "n10", "n11", "n12", "n13", "n14", "n15", "n16", "n17", "n18", "n19", "n20", "n21", "n22", "n23", "n24", "n25", "n26", "n27", "n28", "n29", "n30", "n31", "n32", "n33", "n34", "n35", "n36", "n37", "n38", "n39", "n40", "n41", "n42", "n43", "n44", "n45", "n46", "n47", "n48", "n49", "n50", "n51", "n52", "n53", "n54", "n55", "n56", "n57", "n58", "n59", "n60", "n61", "n62", "n63", "n64", "n65", "n66", "n67", "n68", "n69"]
        var members: [String: JSONValue] = [:]
        for (index, name) in names.enumerated() { members[name.description] = .int(Int64(index)) }
        var all = Self.arguments(inPlace, members)
        for name in names { _ = all.value(name) }
        #expect(all.value("n69") == .int(69))
        try all.finish()
        members["zz"] = .int(1)
        var oneUnknown = Self.arguments(inPlace, members)
        for name in names.dropFirst() { _ = oneUnknown.value(name) }
        // Read twice: still one member, so two are left unread.
        #expect(oneUnknown.value("n69") == .int(69))
        let error = #expect(throws: ProtocolError.self) { try oneUnknown.finish() }
        #expect(error?.message == "unknown argument 'n00'")
        _ = oneUnknown.value("n00")
        let last = #expect(throws: ProtocolError.self) { try oneUnknown.finish() }
        #expect(last?.message == "unknown argument 'zz'")
    }

    @Test("a name sent that only looks like one read, as a Swift string, is unknown", arguments: [false, true])
    func lookalike(inPlace: Bool) throws {
        // U+212A KELVIN SIGN: "\u{212A}ey" == "Key" as Swift strings; their bytes differ.
        var arguments = Self.arguments(inPlace, ["\u{212A}ey": .int(1)])
        #expect(arguments.value("Key") == nil)
        let error = #expect(throws: ProtocolError.self) { try arguments.finish() }
        #expect(error?.message == "unknown argument '\u{212A}ey'")
    }

    @Test("a string read as its bytes is checked as string() checks it", arguments: [false, true])
    func stringBytes(inPlace: Bool) throws {
        var arguments = Self.arguments(inPlace, ["session": "kh_abc", "escaped": "a\"b\u{E9}", "number": 1, "empty": "", "none": .null])
        #expect(try arguments.stringBytes("session").map { String(buffer: $0) } == "kh_abc")
        #expect(try arguments.stringBytes("escaped").map { String(buffer: $0) } == "a\"b\u{E9}")
        #expect(try arguments.stringBytes("none") == nil)
        #expect(try arguments.stringBytes("absent") == nil)
        let type = #expect(throws: ProtocolError.self) { try arguments.stringBytes("number") }
        #expect(type?.message == "'number' must be a string")
        let empty = #expect(throws: ProtocolError.self) { try arguments.stringBytes("empty", maxBytes: 8) }
        #expect(empty?.message == "'empty' must be 1 to 8 bytes long")
        let long = #expect(throws: ProtocolError.self) { try arguments.stringBytes("session", maxBytes: 5) }
        #expect(long?.message == "'session' must be 1 to 5 bytes long")
        let required = #expect(throws: ProtocolError.self) { try arguments.stringBytes("missing", required: true) }
        #expect(required?.message == "'missing' is required")
        try arguments.finish()
    }
}
