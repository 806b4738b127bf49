import KeyholeProtocol
import Testing
@testable import KeyholeStore

/// WALRecordTypes.md: every record type encodes and decodes, and payloads that do not parse exactly
/// are refused.
@Suite("Store records")
struct StoreRecordTests {
    static let principal = Principal(issuer: "apple", sub: "001234.abcdef.0042")
    static let id = SessionID(high: 0x0102_0304_0506_0708, low: 0x1112_1314_1516_1718)

    static let all: [StoreRecord] = [
        .noop,
        .sessionCreate(.init(
            id: id, check: SessionCheck(high: 7, low: 9), principal: principal, createdAt: 1_700_000_000,
            expiresAt: 1_702_592_000, idleSeconds: 604_800, data: Array(#"{"cart":[1,2]}"#.utf8))),
        .sessionCreate(.init(
            id: id, check: SessionCheck(high: 1, low: 2), principal: Principal(issuer: "ü", sub: ""), createdAt: -5,
            expiresAt: 0, idleSeconds: 0, data: nil)),
        .sessionTouch(id, lastSeenAt: 1_700_000_123),
        .sessionRevoke(id),
        .sessionRevokeAll(principal),
        .userPut(principal, User(principal: principal, createdAt: 1, updatedAt: 2, lastLoginAt: 3, fields: ["email": "a@b.c"]).recordJSON),
        .userDelete(principal),
        .outboxPut(OutboxEntry(
            id: 0xFEDC_BA98_7654_3210, kind: "apple.revoke", createdAt: 1_700_000_000,
            payload: ["sub": "001234.abcdef.0042", "token": "c2VhbGVk", "n": .int(3)])),
        .outboxDone(0xFEDC_BA98_7654_3210),
    ]

    @Test("every type round-trips through a WAL record", arguments: all)
    func roundTrip(_ record: StoreRecord) {
        #expect(StoreRecord(record.walRecord) == record)
    }

    @Test("session.create has the documented layout")
    func layout() {
        guard case .sessionCreate(let session) = Self.all[1] else { return }
        let body = { var bytes: [UInt8] = []; StoreRecord.sessionCreate(session).appendBody(to: &bytes); return bytes }()
        #expect(body[0] == 0x10)
        #expect(Array(body[1..<17]) == Self.id.bytes)
        // id, check, then issuer as u16 length + UTF-8.
        #expect(Array(body[33..<35]) == [0, 5])
        #expect(String(decoding: body[35..<40], as: UTF8.self) == "apple")
        #expect(body.count == 1 + 32 + 2 + 5 + 2 + 18 + 8 + 8 + 4 + 4 + 14)
    }

    @Test("truncated payloads, trailing bytes and unknown types are refused", arguments: all.filter { $0 != .noop })
    func malformed(_ record: StoreRecord) {
        let wal = record.walRecord
        for cut in 0..<wal.payload.count {
            #expect(StoreRecord(WALRecord(type: wal.type, payload: Array(wal.payload[..<cut]))) == nil)
        }
        #expect(StoreRecord(WALRecord(type: wal.type, payload: wal.payload + [0])) == nil)
        #expect(StoreRecord(WALRecord(type: 0x7F, payload: wal.payload)) == nil)
    }

    @Test("strings that are not UTF-8 and JSON that is not an object are refused")
    func badContent() {
        var payload: [UInt8] = []
        payload.appendBigEndian(UInt16(2))
        payload += [0xC3, 0x28]
        payload.appendString("sub")
        #expect(StoreRecord(WALRecord(type: 0x13, payload: payload)) == nil)

        for json in ["[1]", "{\"a\":", "\"text\""] {
            var create: [UInt8] = []
            StoreRecord.sessionCreate(.init(
                id: Self.id, check: SessionCheck(high: 0, low: 0), principal: Self.principal, createdAt: 0, expiresAt: 1,
                idleSeconds: 1, data: Array(json.utf8))).appendBody(to: &create)
            #expect(StoreRecord(WALRecord(type: create[0], payload: Array(create[1...]))) == nil, "\(json)")
        }
        var user: [UInt8] = []
        StoreRecord.userPut(Self.principal, Array(#"{"created_at":"yesterday","updated_at":1}"#.utf8)).appendBody(to: &user)
        #expect(StoreRecord(WALRecord(type: user[0], payload: Array(user[1...]))) == nil)
        // An outbox entry's payload is an object, never absent.
        for json in ["", "[1]", "\"text\""] {
            var payload: [UInt8] = []
            payload.appendBigEndian(UInt64(1))
            payload.appendString("apple.revoke")
            payload.appendBigEndian(Int64(0))
            payload.appendBlob(json.isEmpty ? nil : Array(json.utf8))
            #expect(StoreRecord(WALRecord(type: 0x40, payload: payload)) == nil, "\(json)")
        }
    }
}

