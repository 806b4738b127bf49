import KeyholeProtocol
import Testing

@testable import KeyholeServer

/// Reading `args`: types, bounds, and members nobody read.
@Suite("Arguments")
struct ArgumentsTests {
    static func arguments(_ members: [String: JSONValue]) -> Arguments {
        Arguments(Request(id: nil, op: "test", args: members))
    }

    @Test("members read, absent or null, pass finish")
    func allRead() throws {
        var arguments = Self.arguments(["sub": .string("u1"), "ttl_s": .int(120), "data": .null])
        #expect(try arguments.string("sub") == "u1")
        #expect(try arguments.string("issuer") == nil)
        #expect(try arguments.int("ttl_s", in: 60...3600) == 120)
        #expect(try arguments.int("idle_s", in: 60...3600) == nil)
        #expect(arguments.value("data") == .some(.null))
        try arguments.finish()
    }

    @Test("no args at all pass finish")
    func empty() throws {
        var arguments = Self.arguments([:])
        #expect(try arguments.string("sub") == nil)
        try arguments.finish()
    }

    @Test("the first member in sorted order that nobody read is named")
    func unknownNamed() throws {
        var arguments = Self.arguments(["sub": .string("u1"), "zeta": .int(1), "beta": .bool(true)])
        _ = try arguments.string("sub")
        _ = try arguments.string("issuer")
        let error = #expect(throws: ProtocolError.self) { try arguments.finish() }
        #expect(error?.code == ProtocolError.badRequest("").code)
        #expect(error?.message == "unknown argument 'beta'")
    }

    @Test("an unknown member is found even when as many names were read as members sent")
    func unknownWithAbsentReads() throws {
        var arguments = Self.arguments(["sub": .string("u1"), "typo": .int(1)])
        _ = try arguments.string("sub")
        _ = try arguments.string("issuer")
        let error = #expect(throws: ProtocolError.self) { try arguments.finish() }
        #expect(error?.message == "unknown argument 'typo'")
    }

    @Test("wrong types and bounds are bad_request naming the member")
    func typesAndBounds() throws {
        var arguments = Self.arguments(["sub": .int(1), "ttl_s": .int(5), "name": .string("")])
        #expect(throws: ProtocolError.self) { try arguments.string("sub") }
        let bound = #expect(throws: ProtocolError.self) { try arguments.int("ttl_s", in: 60...3600) }
        #expect(bound?.message == "'ttl_s' must be from 60 to 3600")
        let empty = #expect(throws: ProtocolError.self) { try arguments.string("name", maxBytes: 10) }
        #expect(empty?.message == "'name' must be 1 to 10 bytes long")
    }

    @Test("a name read twice counts once, so it cannot hide an unknown member")
    func readTwice() throws {
        var arguments = Self.arguments(["sub": .string("u1"), "typo": .int(1)])
        _ = try arguments.string("sub")
        _ = try arguments.string("sub")
        let error = #expect(throws: ProtocolError.self) { try arguments.finish() }
        #expect(error?.message == "unknown argument 'typo'")
    }

    @Test("more than eight names are tracked too")
    func manyNames() throws {
        let names = (0..<12).map { "n\($0)" }
        var members: [String: JSONValue] = [:]
        for name in names { members[name] = .int(1) }
        var all = Self.arguments(members)
        for name in names { _ = all.value(name) }
        try all.finish()
        members["zz"] = .int(2)
        var oneUnknown = Self.arguments(members)
        for name in names { _ = oneUnknown.value(name) }
        let error = #expect(throws: ProtocolError.self) { try oneUnknown.finish() }
        #expect(error?.message == "unknown argument 'zz'")
    }
}
