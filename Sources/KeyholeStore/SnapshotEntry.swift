/// One entry of a snapshot (SNAPSHOT.md, "Entries"): a principal with their user record, if any, or
/// one of the sessions of the principal before it.
enum SnapshotEntry: Equatable {
    /// A session without its principal (that of the nearest principal entry before it).
    struct SessionState: Equatable {
        var id: SessionID
        var check: SessionCheck
        var createdAt: Int64
        var expiresAt: Int64
        var idleSeconds: UInt32
        var lastSeenAt: Int64
        var data: [UInt8]?
    }

    case principal(Principal, User?)
    case session(SessionState)
    /// An outbox entry (format 2); they come before the first principal.
    case outbox(OutboxEntry)

    enum Kind: UInt8 {
        case principal = 0x21
        case session = 0x30
        case outbox = 0x40
    }

    /// Appends an outbox entry's body.
    static func appendOutbox(_ entry: OutboxEntry, to bytes: inout [UInt8]) {
        bytes.append(Kind.outbox.rawValue)
        entry.appendFields(to: &bytes)
    }

    /// Appends a principal entry's body; `userJSON` is the user record as stored, if there is one.
    static func appendPrincipal(_ principal: Principal, userJSON: [UInt8]?, to bytes: inout [UInt8]) {
        bytes.append(Kind.principal.rawValue)
        bytes.appendString(principal.issuer)
        bytes.appendString(principal.sub)
        bytes.appendBlob(userJSON)
    }

    /// Appends a session entry's body.
    static func appendSession(_ session: SessionState, to bytes: inout [UInt8]) {
        bytes.append(Kind.session.rawValue)
        bytes.appendID(session.id)
        bytes.appendCheck(session.check)
        bytes.appendBigEndian(session.createdAt)
        bytes.appendBigEndian(session.expiresAt)
        bytes.appendBigEndian(session.idleSeconds)
        bytes.appendBigEndian(session.lastSeenAt)
        bytes.appendBlob(session.data)
    }

    /// Decodes an entry's body; `nil` for an unknown type or a payload that does not parse exactly
    /// (the log's checks: UTF-8 strings, JSON objects, a user record with its times).
    init?(body: ArraySlice<UInt8>) {
        guard let type = body.first, let kind = Kind(rawValue: type) else { return nil }
        var reader = ByteReader(body.dropFirst())
        switch kind {
        case .principal:
            guard let issuer = reader.string(), let sub = reader.string(), let json = reader.blob() else { return nil }
            let principal = Principal(issuer: issuer, sub: sub)
            if let json {
                guard let user = User(principal: principal, recordJSON: json) else { return nil }
                self = .principal(principal, user)
            } else {
                self = .principal(principal, nil)
            }
        case .session:
            guard let id = reader.sessionID(), let check = reader.sessionCheck(), let createdAt = reader.int64(),
                let expiresAt = reader.int64(), let idle = reader.uint32(), let lastSeenAt = reader.int64(),
                let data = reader.blob(), data.map(StoreRecord.isJSONObject) ?? true
            else { return nil }
            self = .session(SessionState(
                id: id, check: check, createdAt: createdAt,
                expiresAt: expiresAt, idleSeconds: idle, lastSeenAt: lastSeenAt, data: data))
        case .outbox:
            guard let entry = OutboxEntry(reading: &reader) else { return nil }
            self = .outbox(entry)
        }
        guard reader.isAtEnd else { return nil }
    }
}
