import KeyholeProtocol
import NIOCore

/// `session.get`'s result written straight from the tables, for `Store.writeSession`.
extension StoreTables {
    /// Writes session `slot`'s `session.get` result (PROTOCOL.md section 6) at the end of `buffer`:
    /// compact JSON, members sorted as `JSONValue` writes them, `data` copied as stored, and `user`
    /// the owner's `User.publicJSON` or `null`. Read under the store's lock: no `Session` or `User` is
    /// made and handed out.
    func writeSessionJSON(_ slot: UInt32, to buffer: inout ByteBuffer) {
        // Taken out once, before the output closure: each reach into the tables from inside it
        // would retain and release the arrays' storage.
        let session = sessionSlots[slot]
        // The principal's parts, not its whole slot (whose copy costs more than the parts).
        let owner = session.principal
        let principal = (key: principalSlots[owner].key, user: principalSlots[owner].user)
        // Room for every member but the user's own fields; a user with fields may take a second try.
        let hasFields = principal.user.map { !$0.fields.isEmpty } ?? false
        let guess = 448 + (session.data?.count ?? 0) + 2 * (principal.key.issuer.utf8.count + principal.key.sub.utf8.count)
            + (hasFields ? 256 : 0)
        buffer.writeJSON(guess: guess) { out in
            out.write("{\"created_at\":")
            out.write(integer: session.createdAt)
            out.write(",\"data\":")
            if let data = session.data { data.withUnsafeBytes { out.write(json: $0) } } else { out.write("{}") }
            out.write(",\"expires_at\":")
            out.write(integer: session.expiresAt)
            out.write(",\"id\":\"")
            session.id.writeText(to: &out)
            out.write("\",\"idle_timeout_s\":")
            out.write(integer: Int64(session.idleSeconds))
            out.write(",\"issuer\":")
            out.write(string: principal.key.issuer)
            out.write(",\"last_seen_at\":")
            out.write(integer: session.lastSeenAt)
            out.write(",\"sub\":")
            out.write(string: principal.key.sub)
            out.write(",\"user\":")
            if let user = principal.user {
                User.writePublicJSON(
                    principal.key, createdAt: user.createdAt, updatedAt: user.updatedAt, lastLoginAt: user.lastLoginAt,
                    fields: user.fields, to: &out)
            } else {
                out.write("null")
            }
            out.write(byte: UInt8(ascii: "}"))
        }
    }
}
