import KeyholeProtocol
import NIOCore

/// A user: what keyholed knows of one principal besides their sessions (WALRecordTypes.md, "The user
/// record").
public struct User: Sendable, Equatable {
    /// Whose record this is.
    public var principal: Principal
    /// When the user was first seen (their first session, or the update that created them).
    public var createdAt: Int64
    /// When the record last changed.
    public var updatedAt: Int64
    /// When their last session was created, if one was.
    public var lastLoginAt: Int64?
    /// The other members: `email`, `email_verified`, `is_private_email`, `name`, `ext` and any a newer
    /// keyholed wrote.
    public var fields: [String: JSONValue]

    /// A user.
    public init(principal: Principal, createdAt: Int64, updatedAt: Int64, lastLoginAt: Int64? = nil, fields: [String: JSONValue] = [:]) {
        self.principal = principal
        self.createdAt = createdAt
        self.updatedAt = updatedAt
        self.lastLoginAt = lastLoginAt
        self.fields = fields
    }

    /// The record as stored: compact JSON of every member.
    package var recordJSON: [UInt8] {
        var object = fields
        object["created_at"] = .int(createdAt)
        object["updated_at"] = .int(updatedAt)
        if let lastLoginAt { object["last_login_at"] = .int(lastLoginAt) }
        var buffer = ByteBuffer()
        JSONValue.object(object).write(to: &buffer)
        return Array(buffer.readableBytesView)
    }

    /// A user from a stored record; `nil` when it is not an object with integer times.
    package init?(principal: Principal, recordJSON: [UInt8]) {
        guard case .object(var object)? = try? JSONValue.parse(ByteBuffer(bytes: recordJSON)),
            let createdAt = object.removeValue(forKey: "created_at")?.intValue,
            let updatedAt = object.removeValue(forKey: "updated_at")?.intValue
        else { return nil }
        let lastLogin = object.removeValue(forKey: "last_login_at")
        guard lastLogin == nil || lastLogin?.intValue != nil else { return nil }
        self.init(principal: principal, createdAt: createdAt, updatedAt: updatedAt, lastLoginAt: lastLogin?.intValue, fields: object)
    }

    /// What `user.get` answers: the record without `ext` (issuer-specific secrets stay inside keyholed),
    /// with its issuer and sub.
    public var publicJSON: [String: JSONValue] {
        var object = fields
        object.removeValue(forKey: "ext")
        object["issuer"] = .string(principal.issuer)
        object["sub"] = .string(principal.sub)
        object["created_at"] = .int(createdAt)
        object["updated_at"] = .int(updatedAt)
        object["last_login_at"] = lastLoginAt.map { .int($0) } ?? .null
        return object
    }

    /// The members `publicJSON` always has, in the order `JSONValue` writes them.
    private static let fixedMembers = ["created_at", "issuer", "last_login_at", "sub", "updated_at"]

    /// Writes `publicJSON` as compact JSON exactly as `JSONValue.object(publicJSON).write(to:)` does
    /// (members sorted), without building the dictionary: `session.get` writes one per request.
    public func writePublicJSON(to buffer: inout ByteBuffer) {
        buffer.writeJSON(guess: fields.isEmpty ? 192 : 512) { writePublicJSON(to: &$0) }
    }

    /// `writePublicJSON(to:)` into output another answer is being written to.
    public func writePublicJSON(to out: inout JSONOutput) {
        Self.writePublicJSON(principal, createdAt: createdAt, updatedAt: updatedAt, lastLoginAt: lastLoginAt, fields: fields, to: &out)
    }

    /// `publicJSON` of a user's parts, as they lie in the store's tables (no `User` is made of them).
    static func writePublicJSON(
        _ principal: Principal, createdAt: Int64, updatedAt: Int64, lastLoginAt: Int64?, fields: [String: JSONValue],
        to out: inout JSONOutput
    ) {
        let names = fields.isEmpty ? [] : fields.keys.filter { $0 != "ext" && !fixedMembers.contains($0) }.sorted()
        var next = 0
        var first = true
        func separator(_ out: inout JSONOutput) {
            out.write(byte: first ? UInt8(ascii: "{") : UInt8(ascii: ","))
            first = false
        }
        func fieldsBefore(_ key: String?, _ out: inout JSONOutput) {
            while next < names.count, key.map({ names[next] < $0 }) ?? true {
                separator(&out)
                out.write(string: names[next])
                out.write(byte: UInt8(ascii: ":"))
                out.write(value: fields[names[next]]!)
                next += 1
            }
        }
        /// The fields sorting before `name`, then `name`'s key (written as it is: none needs escaping).
        func fixed(_ name: StaticString, _ out: inout JSONOutput) {
            if !names.isEmpty { fieldsBefore(name.description, &out) }
            separator(&out)
            out.write(byte: UInt8(ascii: "\""))
            out.write(name)
            out.write("\":")
        }
        fixed("created_at", &out)
        out.write(integer: createdAt)
        fixed("issuer", &out)
        out.write(string: principal.issuer)
        fixed("last_login_at", &out)
        if let lastLoginAt { out.write(integer: lastLoginAt) } else { out.write("null") }
        fixed("sub", &out)
        out.write(string: principal.sub)
        fixed("updated_at", &out)
        out.write(integer: updatedAt)
        fieldsBefore(nil, &out)
        out.write(byte: UInt8(ascii: "}"))
    }
}
