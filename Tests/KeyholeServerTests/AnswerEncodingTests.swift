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

    /// session.get's answer for `session` and `user` as the store writes it (`StoreTables.writeSessionJSON`),
    /// after what `buffer` holds: the tables made to hold exactly these values, extreme ones included.
    static func writeSessionGet(_ session: Session, user: User?, into buffer: inout ByteBuffer) {
        var tables = StoreTables()
        var none: [StoreTables.Undo]? = nil
        let principal = tables.principalSlot(for: session.principal)
        let new = StoreRecord.NewSession(
            id: session.id, check: SessionCheck(high: 0, low: 0), principal: session.principal, createdAt: session.createdAt,
            expiresAt: session.expiresAt, idleSeconds: session.idleSeconds, data: session.data)
        let slot = tables.insert(new, principal: principal, lastSeenAt: session.lastSeenAt, loggedSeenAt: session.lastSeenAt)
        if let user {
            let state = StoreTables.UserState(
                createdAt: user.createdAt, updatedAt: user.updatedAt, lastLoginAt: user.lastLoginAt, fields: user.fields)
            tables.setUser(session.principal, state, undo: &none)
        }
        tables.writeSessionJSON(slot, to: &buffer)
    }

    static func sessionGet(_ session: Session, user: User?) -> ByteBuffer {
        var buffer = ByteBuffer()
        writeSessionGet(session, user: user, into: &buffer)
        return buffer
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
            #expect(Self.text(Self.sessionGet(session, user: user)) == Self.text(expected))
        }
    }

    @Test("written in place (after the bytes already in the batch, the buffer grown as it goes), session.get's answer is the same bytes")
    func sessionGetInPlace() {
        let session = Self.session(Self.principals[1], data: Array(#"{"k":"v"}"#.utf8), times: (1, 2, 3))
        for prefix in [0, 1, 3000] {
            var batch = ByteBuffer(repeating: UInt8(ascii: "x"), count: prefix)
            Self.writeSessionGet(session, user: nil, into: &batch)
            #expect(batch.readableBytes > prefix)
            #expect(batch.readableBytesView.prefix(prefix).allSatisfy { $0 == UInt8(ascii: "x") })
            #expect(String(decoding: batch.readableBytesView.dropFirst(prefix), as: UTF8.self)
                    == Self.text(Self.sessionGet(session, user: nil)))
        }
    }

    @Test("an answer written in place (its head, the result, one brace) is the response Response writes", arguments: [
        RequestID?.none, .int(-7), .string("a\"b\u{1}"),
    ])
    func inPlaceEnvelope(id: RequestID?) {
        let result = ByteBuffer(string: #"{"a":1}"#)
        var written = ByteBuffer()
        Response.writeSuccessHead(id: id, to: &written)
        written.writeImmutableBuffer(result)
        written.writeInteger(UInt8(ascii: "}"))
        var expected = ByteBuffer()
        Response.encoded(id: id, result: result).write(to: &expected)
        #expect(written == expected)
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

    @Test("session data over the limit is refused with its exact size, the limit's room only written")
    func dataOverTheLimit() throws {
        let big: [String: JSONValue] = ["k": .string(String(repeating: "\u{1}", count: 100_000)), "n": .int(-12)]
        let size = JSONValue.object(big).jsonText.utf8.count
        let error = try #require(throws: ProtocolError.self) { try StoreOperations.sessionData(.object(big), limit: 4096) }
        // Errors compare by code; the size is in the message.
        #expect(error.code == .dataTooLarge && error.message.contains("\(size)"), "\(error.message), expected \(size)")
        let small: [String: JSONValue] = ["cart": .array([.int(1), .int(2)])]
        let stored = try #require(try StoreOperations.sessionData(.object(small), limit: 4096))
        #expect(String(decoding: stored, as: UTF8.self) == #"{"cart":[1,2]}"#)
        // Exactly at the limit is allowed; one byte over is not.
        let exact = try #require(try StoreOperations.sessionData(.object(small), limit: 14))
        #expect(exact.count == 14)
        let over = try #require(throws: ProtocolError.self) { try StoreOperations.sessionData(.object(small), limit: 13) }
        #expect(over.code == .dataTooLarge && over.message.contains("14"), "\(over.message)")
    }
}
