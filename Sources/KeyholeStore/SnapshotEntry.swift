/// One entry of a snapshot (SNAPSHOT.md, "Entries"): a user's record or a session as it stands.
enum SnapshotEntry: Equatable {
    case user(Principal, [UInt8])
    case session(StoreRecord.NewSession, lastSeenAt: Int64)

    enum Kind: UInt8 {
        case user = 0x20
        case session = 0x30
    }

    /// Appends a user entry's body.
    static func appendUser(_ principal: Principal, json: [UInt8], to bytes: inout [UInt8]) {
        bytes.append(Kind.user.rawValue)
        bytes.appendString(principal.issuer)
        bytes.appendString(principal.sub)
        bytes.appendBlob(json)
    }

    /// Appends a session entry's body.
    static func appendSession(
        id: SessionID, check: SessionCheck, principal: Principal, createdAt: Int64, expiresAt: Int64,
        idleSeconds: UInt32, lastSeenAt: Int64, data: [UInt8]?, to bytes: inout [UInt8]
    ) {
        bytes.append(Kind.session.rawValue)
        bytes.appendBigEndian(id.high)
        bytes.appendBigEndian(id.low)
        bytes.appendBigEndian(check.high)
        bytes.appendBigEndian(check.low)
        bytes.appendString(principal.issuer)
        bytes.appendString(principal.sub)
        bytes.appendBigEndian(createdAt)
        bytes.appendBigEndian(expiresAt)
        bytes.appendBigEndian(idleSeconds)
        bytes.appendBigEndian(lastSeenAt)
        bytes.appendBlob(data)
    }

    /// Appends this entry's body.
    func appendBody(to bytes: inout [UInt8]) {
        switch self {
        case .user(let principal, let json):
            Self.appendUser(principal, json: json, to: &bytes)
        case .session(let new, let lastSeenAt):
            Self.appendSession(
                id: new.id, check: new.check, principal: new.principal, createdAt: new.createdAt,
                expiresAt: new.expiresAt, idleSeconds: new.idleSeconds, lastSeenAt: lastSeenAt, data: new.data,
                to: &bytes)
        }
    }

    /// Decodes an entry's body; `nil` for an unknown type or a payload that does not parse exactly
    /// (the same checks as the log's records: UTF-8 strings, JSON objects, a user record with its times).
    init?(body: ArraySlice<UInt8>) {
        guard let type = body.first, let kind = Kind(rawValue: type) else { return nil }
        var reader = ByteReader(body.dropFirst())
        switch kind {
        case .user:
            guard let issuer = reader.string(), let sub = reader.string(), let json = reader.blob(), let json else { return nil }
            let principal = Principal(issuer: issuer, sub: sub)
            guard User(principal: principal, recordJSON: json) != nil else { return nil }
            self = .user(principal, json)
        case .session:
            guard let id = reader.sessionID(), let check = reader.sessionID(), let issuer = reader.string(),
                let sub = reader.string(), let createdAt = reader.int64(), let expiresAt = reader.int64(),
                let idle = reader.uint32(), let lastSeenAt = reader.int64(), let data = reader.blob(),
                data.map(StoreRecord.isJSONObject) ?? true
            else { return nil }
            self = .session(
                StoreRecord.NewSession(
                    id: id, check: SessionCheck(high: check.high, low: check.low),
                    principal: Principal(issuer: issuer, sub: sub), createdAt: createdAt, expiresAt: expiresAt,
                    idleSeconds: idle, data: data),
                lastSeenAt: lastSeenAt)
        }
        guard reader.isAtEnd else { return nil }
    }
}
