import KeyholeProtocol
import NIOCore
import Testing

@testable import KeyholeServer
@testable import KeyholeStore

/// The session answers are written by hand for speed; they must be the bytes `JSONValue` writes.
@Suite("Answer encoding")
struct AnswerEncodingTests {
    static func text(_ buffer: ByteBuffer) -> String { String(buffer: buffer) }
    static func text(_ value: JSONValue) -> String { value.jsonText }

    static let principals = [
        Principal(issuer: "apple", sub: "001234.abcdef"),
        Principal(issuer: "we\"ird\\issuer", sub: "tab\tnew\nline\u{1}é😀"),
    ]

    static func session(_ principal: Principal, data: [UInt8]?, times: (Int64, Int64, Int64)) -> Session {
        Session(
            id: SessionID(high: 0x0123_4567_89AB_CDEF, low: 0xFEDC_BA98_7654_3210), principal: principal,
            createdAt: times.0, expiresAt: times.1, lastSeenAt: times.2, idleSeconds: UInt32.max, data: data)
    }

    @Test("session.get is JSONValue's serialisation of the same object, with and without data and user", arguments: [0, 1])
    func sessionGet(principalIndex: Int) throws {
        let principal = Self.principals[principalIndex]
        let user = User(
            principal: principal, createdAt: -5, updatedAt: Int64.max, lastLoginAt: nil,
            fields: ["email": .string("a@b.example"), "name": .object(["given": .string("Ada")]), "ext": .string("secret"), "aaa": .bool(true)])
        let data = Array(#"{"cart":[1,2],"z":null}"#.utf8)
        for (data, user, times) in [
            (nil as [UInt8]?, nil as User?, (Int64(0), Int64(1), Int64(0))),
            (data, user, (Int64.min, Int64.max, Int64(1_800_000_000))),
        ] {
            let session = Self.session(principal, data: data, times: times)
            var userValue = JSONValue.null
            if let user {
                var buffer = ByteBuffer()
                user.writePublicJSON(to: &buffer)
                #expect(Self.text(buffer) == Self.text(.object(user.publicJSON)))
                userValue = .object(user.publicJSON)
            }
            let expected: JSONValue = .object([
                "created_at": .int(session.createdAt),
                "data": data.map { try! JSONValue.parse(ByteBuffer(bytes: $0)) } ?? .object([:]),
                "expires_at": .int(session.expiresAt),
                "id": .string(session.id.description),
                "idle_timeout_s": .int(Int64(session.idleSeconds)),
                "issuer": .string(principal.issuer),
                "last_seen_at": .int(session.lastSeenAt),
                "sub": .string(principal.sub),
                "user": userValue,
            ])
            #expect(Self.text(StoreOperations.encode(session, user: user)) == Self.text(expected))
        }
    }

    @Test("session.create is JSONValue's serialisation of the same object")
    func sessionCreate() throws {
        let (token, _, _) = try #require(SessionToken.generate())
        let session = Self.session(Self.principals[0], data: nil, times: (1, 2, 1))
        let expected: JSONValue = .object([
            "expires_at": .int(2), "id": .string(session.id.description), "session": .string(token),
        ])
        #expect(Self.text(StoreOperations.encodeCreated(token: token, session: session)) == Self.text(expected))
    }
}
