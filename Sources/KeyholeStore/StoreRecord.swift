import KeyholeProtocol
import NIOCore

/// A change to the store as one log record (WALRecordTypes.md is normative for the layouts).
enum StoreRecord: Equatable, Sendable {
    /// A session as created.
    struct NewSession: Equatable, Sendable {
        var id: SessionID
        var check: SessionCheck
        var principal: Principal
        var createdAt: Int64
        var expiresAt: Int64
        var idleSeconds: UInt32
        /// Compact JSON of an object, or `nil`.
        var data: [UInt8]?
    }

    /// The fewest bytes a framed session.create record takes (empty issuer, sub and data): start-up
    /// reserves room for at most the log's size over this many new sessions.
    static let smallestCreateBytes = WALRecord.headerBytes + 1 + 16 + 16 + 2 + 2 + 8 + 8 + 4 + 4

    case noop
    case sessionCreate(NewSession)
    case sessionTouch(SessionID, lastSeenAt: Int64)
    case sessionRevoke(SessionID)
    case sessionRevokeAll(Principal)
    /// The user's whole record as compact JSON.
    case userPut(Principal, [UInt8])
    case userDelete(Principal)
    /// Work owed outside (an Apple revocation), kept until done.
    case outboxPut(OutboxEntry)
    case outboxDone(UInt64)

    enum Kind: UInt8 {
        case noop = 0x01
        case sessionCreate = 0x10
        case sessionTouch = 0x11
        case sessionRevoke = 0x12
        case sessionRevokeAll = 0x13
        case userPut = 0x20
        case userDelete = 0x21
        case outboxPut = 0x40
        case outboxDone = 0x41
    }

    var kind: Kind {
        switch self {
        case .noop: .noop
        case .sessionCreate: .sessionCreate
        case .sessionTouch: .sessionTouch
        case .sessionRevoke: .sessionRevoke
        case .sessionRevokeAll: .sessionRevokeAll
        case .userPut: .userPut
        case .userDelete: .userDelete
        case .outboxPut: .outboxPut
        case .outboxDone: .outboxDone
        }
    }

    /// Appends the record's body (type byte and payload) to `bytes`.
    func appendBody(to bytes: inout [UInt8]) {
        bytes.append(kind.rawValue)
        switch self {
        case .noop:
            break
        case .sessionCreate(let session):
            bytes.appendID(session.id)
            bytes.appendCheck(session.check)
            bytes.appendString(session.principal.issuer)
            bytes.appendString(session.principal.sub)
            bytes.appendBigEndian(session.createdAt)
            bytes.appendBigEndian(session.expiresAt)
            bytes.appendBigEndian(session.idleSeconds)
            bytes.appendBlob(session.data)
        case .sessionTouch(let id, let lastSeenAt):
            bytes.appendID(id)
            bytes.appendBigEndian(lastSeenAt)
        case .sessionRevoke(let id):
            bytes.appendID(id)
        case .sessionRevokeAll(let principal), .userDelete(let principal):
            bytes.appendString(principal.issuer)
            bytes.appendString(principal.sub)
        case .userPut(let principal, let json):
            bytes.appendString(principal.issuer)
            bytes.appendString(principal.sub)
            bytes.appendBlob(json)
        case .outboxPut(let entry):
            entry.appendFields(to: &bytes)
        case .outboxDone(let id):
            bytes.appendBigEndian(id)
        }
    }

    /// The record as a WAL record.
    var walRecord: WALRecord {
        var body: [UInt8] = []
        appendBody(to: &body)
        return WALRecord(type: body[0], payload: Array(body[1...]))
    }

    /// Decodes a WAL record; `nil` for an unknown type or a payload that does not parse exactly.
    init?(_ record: WALRecord) {
        guard let kind = Kind(rawValue: record.type) else { return nil }
        var reader = ByteReader(record.payload)
        switch kind {
        case .noop:
            self = .noop
        case .sessionCreate:
            guard let id = reader.sessionID(), let check = reader.sessionCheck(), let issuer = reader.string(),
                let sub = reader.string(), let createdAt = reader.int64(), let expiresAt = reader.int64(),
                let idle = reader.uint32(), let data = reader.blob(), data.map(Self.isJSONObject) ?? true
            else { return nil }
            self = .sessionCreate(NewSession(
                id: id, check: check, principal: Principal(issuer: issuer, sub: sub),
                createdAt: createdAt, expiresAt: expiresAt, idleSeconds: idle, data: data))
        case .sessionTouch:
            guard let id = reader.sessionID(), let lastSeenAt = reader.int64() else { return nil }
            self = .sessionTouch(id, lastSeenAt: lastSeenAt)
        case .sessionRevoke:
            guard let id = reader.sessionID() else { return nil }
            self = .sessionRevoke(id)
        case .sessionRevokeAll, .userDelete, .userPut:
            guard let issuer = reader.string(), let sub = reader.string() else { return nil }
            let principal = Principal(issuer: issuer, sub: sub)
            if kind == .userPut {
                guard let json = reader.blob(), let json, User(principal: principal, recordJSON: json) != nil else { return nil }
                self = .userPut(principal, json)
            } else {
                self = kind == .userDelete ? .userDelete(principal) : .sessionRevokeAll(principal)
            }
        case .outboxPut:
            guard let entry = OutboxEntry(reading: &reader) else { return nil }
            self = .outboxPut(entry)
        case .outboxDone:
            guard let id = reader.uint64() else { return nil }
            self = .outboxDone(id)
        }
        guard reader.isAtEnd else { return nil }
    }
}

extension StoreRecord {
    static func isJSONObject(_ bytes: [UInt8]) -> Bool {
        if case .object? = try? JSONValue.parse(ByteBuffer(bytes: bytes)) { return true }
        return false
    }
}

extension SessionCheck: Equatable {
    package static func == (lhs: SessionCheck, rhs: SessionCheck) -> Bool { lhs.matches(rhs) }
}

extension Array where Element == UInt8 {
    /// A `str`: u16 length, UTF-8 (callers keep strings within `Principal.maximumFieldBytes`).
    mutating func appendString(_ string: String) {
        let utf8 = string.utf8
        precondition(utf8.count <= UInt16.max, "string field over 64 KiB")
        appendBigEndian(UInt16(utf8.count))
        append(contentsOf: utf8)
    }

    /// An `id`: the session id's 16 bytes.
    mutating func appendID(_ id: SessionID) {
        appendBigEndian(id.high)
        appendBigEndian(id.low)
    }

    /// A `check`: the other 16 bytes of the token's SHA-256.
    mutating func appendCheck(_ check: SessionCheck) {
        appendBigEndian(check.high)
        appendBigEndian(check.low)
    }

    /// A `json` blob: u32 length, bytes; length 0 for `nil`.
    mutating func appendBlob(_ blob: [UInt8]?) {
        appendBigEndian(UInt32(blob?.count ?? 0))
        if let blob { append(contentsOf: blob) }
    }
}

/// Reads a record payload field by field; every read fails (`nil`) past the end.
struct ByteReader {
    private let bytes: ArraySlice<UInt8>
    private var offset: Int

    init(_ bytes: [UInt8]) { self.init(bytes[...]) }

    init(_ bytes: ArraySlice<UInt8>) {
        self.bytes = bytes
        offset = bytes.startIndex
    }

    var isAtEnd: Bool { offset == bytes.endIndex }

    mutating func take(_ count: Int) -> ArraySlice<UInt8>? {
        guard count >= 0, bytes.endIndex - offset >= count else { return nil }
        defer { offset += count }
        return bytes[offset..<offset + count]
    }

    mutating func uint64() -> UInt64? {
        guard let slice = take(8) else { return nil }
        return slice.reduce(0) { $0 << 8 | UInt64($1) }
    }

    mutating func int64() -> Int64? { uint64().map { Int64(bitPattern: $0) } }

    mutating func uint32() -> UInt32? {
        guard let slice = take(4) else { return nil }
        return slice.reduce(0) { $0 << 8 | UInt32($1) }
    }

    mutating func sessionID() -> SessionID? {
        guard let high = uint64(), let low = uint64() else { return nil }
        return SessionID(high: high, low: low)
    }

    mutating func sessionCheck() -> SessionCheck? {
        guard let high = uint64(), let low = uint64() else { return nil }
        return SessionCheck(high: high, low: low)
    }

    mutating func string() -> String? {
        guard let high = take(1)?.first, let low = take(1)?.first, let slice = take(Int(high) << 8 | Int(low)) else { return nil }
        return String(validating: slice, as: UTF8.self)
    }

    /// A `json` blob: `.some(nil)` for length 0, `nil` when it runs past the end.
    mutating func blob() -> [UInt8]?? {
        guard let length = uint32(), let slice = take(Int(length)) else { return nil }
        return .some(length == 0 ? nil : Array(slice))
    }
}
