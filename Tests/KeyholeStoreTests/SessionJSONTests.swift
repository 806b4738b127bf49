import KeyholeProtocol
import NIOCore
import Testing

@testable import KeyholeStore

/// `Store.writeSession`, session.get's answer written from the tables under the lock: byte for byte
/// what `JSONValue` writes of the same session and user read the plain way (`Store.session(token:now:)`).
@Suite("session.get's answer, written from the tables")
struct SessionJSONTests {
    let now: Int64 = 1_790_000_000

    /// The answer as PROTOCOL.md builds it from values: the reference.
    static func reference(_ session: Session, _ user: User?) throws -> [UInt8] {
        let data = try session.data.map { try JSONValue.parse(ByteBuffer(bytes: $0)) } ?? .object([:])
        let object: [String: JSONValue] = [
            "created_at": .int(session.createdAt), "data": data, "expires_at": .int(session.expiresAt),
            "id": .string(session.id.description), "idle_timeout_s": .int(Int64(session.idleSeconds)),
            "issuer": .string(session.principal.issuer), "last_seen_at": .int(session.lastSeenAt),
            "sub": .string(session.principal.sub), "user": user.map { .object($0.publicJSON) } ?? .null,
        ]
        var buffer = ByteBuffer()
        JSONValue.object(object).write(to: &buffer)
        return Array(buffer.readableBytesView)
    }

    /// What `writeSession` writes after `prefix`, and whether it found the session.
    static func written(_ store: Store, token: String, now: Int64) -> (found: Bool, bytes: [UInt8]) {
        var buffer = ByteBuffer(string: "prefix")
        var waited = false
        let (found, waits) = Array(token.utf8).withUnsafeBytes {
            store.writeSession(token: $0, now: now, into: &buffer) {
                waited = true
                return { _ in }
            }
        }
        #expect(!waited && !waits, "nothing was on its way to the disk")
        #expect(buffer.readString(length: 6) == "prefix", "written after what was there")
        return (found, Array(buffer.readableBytesView))
    }

    @Test("users with and without fields, ext left out, escapes and non-ASCII, data or none: the reference's bytes")
    func matchesTheReference() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let running = try RunningStore(directory, now: now)
        let store = running.store
        let subjects = ["plain", "quote\"back\\slash", "tab\tnewline\n\u{1}", "José 😀", String(repeating: "long.", count: 40)]
        let fieldSets: [[String: JSONValue]] = [
            [:],
            ["email": "a@example.com", "email_verified": true, "name": "A \"B\"", "ext": ["refresh": "secret"]],
            ["aardvark": 1, "is_private_email": false, "middle": ["nested": [1, 2.5, nil]], "zebra": "last", "ext": nil],
        ]
        var checked = 0
        for (index, sub) in subjects.enumerated() {
            let principal = Principal(issuer: index % 2 == 0 ? "local" : "apple", sub: sub)
            let fields = fieldSets[index % fieldSets.count]
            let data: [UInt8]? = index % 2 == 0 ? nil : Array(#"{"cart":[1,2],"theme":"dark \"x\""}"#.utf8)
            let (token, _) = try await durably { done throws(StoreError) in
                try store.createSession(for: principal, now: now, ttl: 86_400, idle: 3600, data: data, completion: done)
            }
            if !fields.isEmpty {
                _ = try await durably { done throws(StoreError) in
                    try store.updateUser(principal, now: now + 1, completion: done) { $0.fields = fields }
                }
            }
            let time = now + 10 + Int64(index)
            let (found, bytes) = Self.written(store, token: token, now: time)
            #expect(found)
            let (session, user) = try #require(store.session(token: token, now: time))
            #expect(session.lastSeenAt == time, "marked used, as session(token:now:) does")
            #expect(bytes == (try Self.reference(session, user)), "\(sub.debugDescription): \(String(decoding: bytes, as: UTF8.self))")
            #expect(!String(decoding: bytes, as: UTF8.self).contains("secret"))
            checked += 1
        }
        #expect(checked == subjects.count)

        // Unknown, malformed, and expired: found nothing, wrote nothing.
        let (token, _) = try await durably { done throws(StoreError) in
            try store.createSession(for: Principal(issuer: "local", sub: "brief"), now: now, ttl: 60, idle: 60, data: nil, completion: done)
        }
        for (text, time) in [(token, now + 61), ("kh_" + String(repeating: "A", count: 43), now), ("not a token", now), ("", now)] {
            let (found, bytes) = Self.written(store, token: text, now: time)
            #expect(!found && bytes.isEmpty, "\(text)")
        }
        await running.close()
    }
}
