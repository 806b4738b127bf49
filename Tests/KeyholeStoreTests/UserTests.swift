import KeyholeProtocol
import NIOCore
import Testing
@testable import KeyholeStore

/// The user record's public form, which session.get writes straight into its answer.
@Suite("Users")
struct UserTests {
    static let principal = Principal(issuer: "apple", sub: "001234.abc")

    @Test("writePublicJSON writes exactly what publicJSON encodes to", arguments: [
        [:],
        ["email": .string("a@example.com"), "email_verified": .bool(true)],
        // Names before, between and after the fixed members; ext is left out; a field named like a
        // fixed member is overridden by it, as in publicJSON.
        ["aaa": .int(1), "ext": .object(["secret": .string("x")]), "is_private_email": .bool(false), "name": .object(["given": .string("Zoë \"Q\"")]), "zzz": .null],
        ["issuer": .string("forged"), "sub": .string("forged"), "updated_at2": .array([.int(1), .double(2.5)])],
    ] as [[String: JSONValue]])
    func publicJSON(fields: [String: JSONValue]) {
        for lastLogin in [nil, 1_700_000_100] as [Int64?] {
            let user = User(principal: Self.principal, createdAt: 1_700_000_000, updatedAt: 1_700_000_050, lastLoginAt: lastLogin, fields: fields)
            var direct = ByteBuffer()
            user.writePublicJSON(to: &direct)
            var expected = ByteBuffer()
            JSONValue.object(user.publicJSON).write(to: &expected)
            #expect(String(buffer: direct) == String(buffer: expected))
            #expect(!String(buffer: direct).contains("secret"))
        }
    }
}
