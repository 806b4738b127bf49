import KeyholeJOSE
import KeyholeProtocol
import KeyholeStore
import NIOCore

/// Rows as the store reads and writes them: identities and JSON as their bytes (POSTGRES.md,
/// "Tables"), checked on the way in, since a row is input like any other.
enum PostgresRows {
    /// The columns of a session row after its id, in `sessionColumns` order.
    static let sessionColumns = "check_bytes, issuer, sub, created_at, expires_at, last_seen_at, idle_seconds, data"
    typealias SessionRow = (ByteBuffer, ByteBuffer, ByteBuffer, Int64, Int64, Int64, Int32, ByteBuffer?)

    /// The columns of a user row after its key.
    static let userColumns = "created_at, updated_at, last_login_at, fields"
    typealias UserRow = (Int64, Int64, Int64?, ByteBuffer)

    /// A bytea value: postgres-nio sends a ByteBuffer as bytea (an [UInt8] would go as "char"[]).
    static func bytes(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }
    static func bytes(_ bytes: [UInt8]) -> ByteBuffer { ByteBuffer(bytes: bytes) }

    /// A principal from its columns; `nil` for bytes that are not UTF-8 or too long (never written
    /// by keyholed: a row changed by hand).
    static func principal(issuer: ByteBuffer, sub: ByteBuffer) -> Principal? {
        guard let issuer = String(validating: issuer.readableBytesView, as: UTF8.self),
            let sub = String(validating: sub.readableBytesView, as: UTF8.self),
            issuer.utf8.count <= Principal.maximumFieldBytes, sub.utf8.count <= Principal.maximumFieldBytes
        else { return nil }
        return Principal(issuer: issuer, sub: sub)
    }

    /// Whether `a`'s user row is locked before `b`'s (by issuer's bytes, then sub's): every
    /// transaction that locks several users' rows takes them in this order, so that two cannot
    /// deadlock.
    static func locksBefore(_ a: Principal, _ b: Principal) -> Bool {
        let (aIssuer, bIssuer) = (a.issuer.utf8, b.issuer.utf8)
        if !aIssuer.elementsEqual(bIssuer) { return aIssuer.lexicographicallyPrecedes(bIssuer) }
        return a.sub.utf8.lexicographicallyPrecedes(b.sub.utf8)
    }

    /// The session and its check from a row, or why it cannot be read.
    static func session(id: SessionID, _ row: SessionRow) -> Result<(Session, SessionCheck), PostgresStoreError> {
        let (check, issuer, sub, createdAt, expiresAt, lastSeenAt, idleSeconds, data) = row
        // Times within what keyholed writes (1970 to 9999), so that no sum of them overflows.
        let times = 0...253_402_300_799 as ClosedRange<Int64>
        guard let check = SessionCheck(bytes: check.readableBytesView), let principal = principal(issuer: issuer, sub: sub), idleSeconds >= 0,
            times.contains(createdAt), times.contains(expiresAt), times.contains(lastSeenAt)
        else {
            return .failure(.corrupt("session \(id): a check, issuer, sub, time or idle time keyholed could not have written"))
        }
        let session = Session(
            id: id, principal: principal, createdAt: createdAt, expiresAt: expiresAt, lastSeenAt: lastSeenAt,
            idleSeconds: UInt32(idleSeconds), data: data.map { Array($0.readableBytesView) })
        return .success((session, check))
    }

    /// The user from a row's columns, or why it cannot be read.
    static func user(_ principal: Principal, _ row: UserRow) -> Result<User, PostgresStoreError> {
        let (createdAt, updatedAt, lastLoginAt, fields) = row
        guard case .object(let members)? = try? JSONValue.parse(fields) else {
            return .failure(.corrupt("user \(principal): fields are not a JSON object"))
        }
        return .success(User(principal: principal, createdAt: createdAt, updatedAt: updatedAt, lastLoginAt: lastLoginAt, fields: members))
    }

    /// A user's fields as stored: compact JSON of the object.
    static func fields(_ user: User) -> ByteBuffer {
        var buffer = ByteBuffer()
        JSONValue.object(user.fields).write(to: &buffer)
        return buffer
    }

    /// The notification payload for a user: `u:` and the hex of SHA-256(issuer, 0, sub), so that no
    /// identity travels in a notification; `*` (everything) if SHA-256 fails: never a missed one.
    static func userKey(_ principal: Principal) -> String {
        guard let digest = SHA256.digest(Array(principal.issuer.utf8) + [0] + Array(principal.sub.utf8)) else { return "*" }
        return "u:" + hex(digest)
    }

    static func hex(_ bytes: [UInt8]) -> String {
        let digits = Array("0123456789abcdef".utf8)
        var text: [UInt8] = []
        text.reserveCapacity(bytes.count * 2)
        for byte in bytes {
            text.append(digits[Int(byte >> 4)])
            text.append(digits[Int(byte & 0x0F)])
        }
        return String(decoding: text, as: UTF8.self)
    }
}
