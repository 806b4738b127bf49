import KeyholeProtocol
import NIOCore

/// `session.get`'s result written straight from the tables, for `Store.writeSession`.
extension StoreTables {
    /// Writes session `slot`'s `session.get` result (PROTOCOL.md section 6) at the end of `buffer`:
    /// compact JSON, members sorted as `JSONValue` writes them, `data` copied as stored, and `user`
    /// the owner's `User.publicJSON` or `null`. Read under the store's lock: no `Session` or `User` is
    /// made and handed out.
    func writeSessionJSON(_ slot: UInt32, to buffer: inout ByteBuffer) {
        let owner = sessionSlots[slot].principal
        // Room for every member but the user's own fields; a user with fields may take a second try.
        let hasFields = principalSlots[owner].user.map { !$0.fields.isEmpty } ?? false
        let guess = 448 + (sessionSlots[slot].data?.count ?? 0)
            + 2 * (principalSlots[owner].key.issuer.utf8.count + principalSlots[owner].key.sub.utf8.count) + (hasFields ? 256 : 0)
        // Every member read where it lies in the tables, lent to the writer: copied out first, the
        // principal's strings, the data and the fields were each retained and released (atomic
        // counts on lines no other request touches), on every session.get.
        buffer.writeJSON(guess: guess) { out in
            Session.writeGetJSON(
                createdAt: sessionSlots[slot].createdAt, data: sessionSlots[slot].data, expiresAt: sessionSlots[slot].expiresAt,
                id: sessionSlots[slot].id, idleSeconds: sessionSlots[slot].idleSeconds, lastSeenAt: sessionSlots[slot].lastSeenAt,
                principal: principalSlots[owner].key,
                user: principalSlots[owner].user.map { ($0.createdAt, $0.updatedAt, $0.lastLoginAt, $0.fields) }, to: &out)
        }
    }
}

extension Session {
    /// `session.get`'s result (PROTOCOL.md section 6) for this session and its owner's record, at the
    /// end of `buffer`: the same bytes the local store writes from its tables, for a store that
    /// hands out `Session` and `User` values (PostgreSQL's cache).
    public func writeGetJSON(user: User?, to buffer: inout ByteBuffer) {
        let hasFields = user.map { !$0.fields.isEmpty } ?? false
        let guess = 448 + (data?.count ?? 0) + 2 * (principal.issuer.utf8.count + principal.sub.utf8.count) + (hasFields ? 256 : 0)
        buffer.writeJSON(guess: guess) { writeGetJSON(user: user, to: &$0) }
    }

    /// `writeGetJSON(user:to:)` only into the room `buffer` has already: nothing grows and nothing is
    /// written twice, for a caller that holds a lock. Whether it fitted; if not, `buffer` is unchanged.
    public func writeGetJSON(user: User?, within buffer: inout ByteBuffer) -> Bool {
        buffer.writeJSON(reserving: 0) { writeGetJSON(user: user, to: &$0) }
    }

    private func writeGetJSON(user: User?, to out: inout JSONOutput) {
        Self.writeGetJSON(
            createdAt: createdAt, data: data, expiresAt: expiresAt, id: id, idleSeconds: idleSeconds, lastSeenAt: lastSeenAt,
            principal: principal, user: user.map { ($0.createdAt, $0.updatedAt, $0.lastLoginAt, $0.fields) }, to: &out)
    }

    /// The members of `session.get`'s result, sorted as `JSONValue` writes them, `data` copied as
    /// stored (`{}` for none), `user` the owner's `User.publicJSON` or `null`.
    static func writeGetJSON(
        createdAt: Int64, data: [UInt8]?, expiresAt: Int64, id: SessionID, idleSeconds: UInt32, lastSeenAt: Int64, principal: Principal,
        user: (createdAt: Int64, updatedAt: Int64, lastLoginAt: Int64?, fields: [String: JSONValue])?, to out: inout JSONOutput
    ) {
        out.write("{\"created_at\":")
        out.write(integer: createdAt)
        out.write(",\"data\":")
        if let data { data.withUnsafeBytes { out.write(json: $0) } } else { out.write("{}") }
        out.write(",\"expires_at\":")
        out.write(integer: expiresAt)
        out.write(",\"id\":\"")
        id.writeText(to: &out)
        out.write("\",\"idle_timeout_s\":")
        out.write(integer: Int64(idleSeconds))
        out.write(",\"issuer\":")
        out.write(string: principal.issuer)
        out.write(",\"last_seen_at\":")
        out.write(integer: lastSeenAt)
        out.write(",\"sub\":")
        out.write(string: principal.sub)
        out.write(",\"user\":")
        if let user {
            User.writePublicJSON(
                principal, createdAt: user.createdAt, updatedAt: user.updatedAt, lastLoginAt: user.lastLoginAt, fields: user.fields, to: &out)
        } else {
            out.write("null")
        }
        out.write(byte: UInt8(ascii: "}"))
    }
}
