import KeyholeProtocol
import NIOCore

/// `session.get`'s result written straight from the tables, for `Store.writeSession`.
extension StoreTables {
    /// Writes session `slot`'s `session.get` result (PROTOCOL.md section 6) at the end of `buffer`:
    /// compact JSON, members sorted as `JSONValue` writes them, `data` copied as stored, and `user`
    /// the owner's `User.publicJSON` or `null`. Read in place, under the store's lock: no `Session` or
    /// `User` is made, so none of their strings and arrays is retained and released per request.
    func writeSessionJSON(_ slot: UInt32, to buffer: inout ByteBuffer) {
        let owner = sessionSlots[slot].principal
        let issuerBytes = principalSlots[owner].key.issuer.utf8.count
        let subBytes = principalSlots[owner].key.sub.utf8.count
        // Room for every member but the user's own fields; a user with fields may take a second try.
        let hasFields = principalSlots[owner].user.map { !$0.fields.isEmpty } ?? false
        let guess = 448 + (sessionSlots[slot].data?.count ?? 0) + 2 * (issuerBytes + subBytes) + (hasFields ? 256 : 0)
        buffer.writeJSON(guess: guess) { out in
            out.write("{\"created_at\":")
            out.write(integer: sessionSlots[slot].createdAt)
            out.write(",\"data\":")
            if let data = sessionSlots[slot].data { data.withUnsafeBytes { out.write(json: $0) } } else { out.write("{}") }
            out.write(",\"expires_at\":")
            out.write(integer: sessionSlots[slot].expiresAt)
            out.write(",\"id\":\"")
            sessionSlots[slot].id.writeText(to: &out)
            out.write("\",\"idle_timeout_s\":")
            out.write(integer: Int64(sessionSlots[slot].idleSeconds))
            out.write(",\"issuer\":")
            out.write(string: principalSlots[owner].key.issuer)
            out.write(",\"last_seen_at\":")
            out.write(integer: sessionSlots[slot].lastSeenAt)
            out.write(",\"sub\":")
            out.write(string: principalSlots[owner].key.sub)
            out.write(",\"user\":")
            if let user = principalSlots[owner].user {
                User.writePublicJSON(
                    principalSlots[owner].key, createdAt: user.createdAt, updatedAt: user.updatedAt,
                    lastLoginAt: user.lastLoginAt, fields: user.fields, to: &out)
            } else {
                out.write("null")
            }
            out.write(byte: UInt8(ascii: "}"))
        }
    }
}
