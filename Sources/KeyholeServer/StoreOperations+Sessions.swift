import KeyholeProtocol
import KeyholeStore
import NIOCore

extension StoreOperations {
    static func sessionOperations(_ context: Context) -> [String: Operation] {
        let store = context.store
        let now = context.now
        return [
            "session.create": .deferrable { request, _ throws(ProtocolError) in
                var arguments = Arguments(request)
                let principal = try context.principal(&arguments)
                let (ttl, idle, data) = try sessionParameters(&arguments, context.configuration)
                try arguments.finish()
                let time = now()
                return try StoreCommit.run { done throws(StoreError) in
                    try store.createSession(for: principal, now: time, ttl: ttl, idle: UInt32(idle), data: data, completion: done)
                } answer: { created in
                    SessionMetrics.created.increment()
                    return .encoded(encodeCreated(token: created.token, session: created.session))
                }
            },
            "session.get": .writing { request, _, buffer throws(ProtocolError) in
                var arguments = Arguments(request)
                // The token's bytes where they lie in the frame: no String made of them.
                let token = try arguments.stringBytes("session", required: true, maxBytes: 1024)!
                try arguments.finish()
                let time = now()
                // Written straight into the answer by the store, under its lock, as it is read: room
                // is made first, so that growing a big batch is not done while every loop waits.
                buffer.reserveCapacity(minimumWritableBytes: 1024)
                return try StoreCommit.readWriting(into: &buffer, notFound: .sessionNotFound()) { buffer, waiter in
                    token.withUnsafeReadableBytes { store.writeSession(token: $0, now: time, into: &buffer, waiter: waiter) }
                }
            },
            "session.revoke": .deferrable { request, _ throws(ProtocolError) in
                let (token, idText) = try revokeArguments(request)
                let time = now()
                return try StoreCommit.run { done throws(StoreError) in
                    if let token { return try store.revokeSession(token: token, now: time, completion: done) }
                    // An id that cannot be one names no session: the same answer as an unknown one.
                    guard let id = SessionID(text: idText!) else {
                        done(.success(()))
                        return false
                    }
                    return try store.revokeSession(id: id, now: time, completion: done)
                } answer: { revoked in
                    SessionMetrics.count(revoked ? 1 : 0, in: SessionMetrics.revoked)
                    return .object(["revoked": .bool(revoked)])
                }
            },
            "session.revoke_all": .deferrable { request, _ throws(ProtocolError) in
                var arguments = Arguments(request)
                let principal = try context.principal(&arguments)
                try arguments.finish()
                let time = now()
                return try StoreCommit.run { done throws(StoreError) in
                    try store.revokeSessions(of: principal, now: time, completion: done)
                } answer: { count in
                    SessionMetrics.count(count, in: SessionMetrics.revokedAll)
                    return .object(["revoked": .int(Int64(count))])
                }
            },
            "session.list": .deferrable { request, _ throws(ProtocolError) in
                var arguments = Arguments(request)
                let principal = try context.principal(&arguments)
                try arguments.finish()
                let time = now()
                return try StoreCommit.read(store, { store.sessions(of: principal, now: time) }) { sessions in
                    .success(.object(listJSON(sessions)))
                }
            },
        ]
    }

    /// `session.list`'s answer.
    static func listJSON(_ sessions: [Session]) -> [String: JSONValue] {
        [
            "sessions": .array(sessions.map { session in
                [
                    "id": .string(session.id.description),
                    "created_at": .int(session.createdAt),
                    "expires_at": .int(session.expiresAt),
                    "last_seen_at": .int(session.lastSeenAt),
                ]
            })
        ]
    }

    /// `session.revoke`'s one of `session` (a token) and `id`.
    static func revokeArguments(_ request: Request) throws(ProtocolError) -> (token: String?, id: String?) {
        var arguments = Arguments(request)
        let token = try arguments.string("session", maxBytes: 1024)
        let idText = try arguments.string("id", maxBytes: 64)
        try arguments.finish()
        guard (token == nil) != (idText == nil) else { throw .badRequest("give exactly one of 'session' and 'id'") }
        return (token, idText)
    }

    /// A new session's `ttl_s`, `idle_s` and `data`, with the configured limits and defaults (read by
    /// session.create and apple.sign_in alike).
    static func sessionParameters(
        _ arguments: inout Arguments, _ configuration: Configuration
    ) throws(ProtocolError) -> (ttl: Int64, idle: Int64, data: [UInt8]?) {
        let ttl = try arguments.int("ttl_s", in: 60...configuration.maxTTL) ?? configuration.defaultTTL
        let idle = try arguments.int("idle_s", in: 60...configuration.maxTTL) ?? min(configuration.defaultIdle, ttl)
        let data = try sessionData(arguments.value("data"), limit: configuration.maxDataBytes)
        return (ttl, idle, data)
    }

    /// The compact JSON of `data` (an object or absent), within `limit` bytes; an empty object is none.
    static func sessionData(_ value: JSONValue?, limit: Int) throws(ProtocolError) -> [UInt8]? {
        switch value {
        case nil, .null?:
            return nil
        case .object(let members)?:
            if members.isEmpty { return nil }
            // Room for the limit only: data over it is counted, not written out in full.
            var buffer = ByteBuffer()
            if let size = buffer.writeJSONCounting(reserving: limit, { $0.write(value: .object(members)) }) {
                throw .dataTooLarge(size: size, limit: limit)
            }
            // The buffer may have had room past the limit.
            guard buffer.readableBytes <= limit else { throw .dataTooLarge(size: buffer.readableBytes, limit: limit) }
            return Array(buffer.readableBytesView)
        default:
            throw .badRequest("'data' must be an object")
        }
    }

    /// The `session.create` result as compact JSON, members sorted as `JSONValue` writes them.
    static func encodeCreated(token: String, session: Session) -> ByteBuffer {
        // Sized at once: an empty buffer grown later costs a second allocation.
        let guess = 96 + token.utf8.count
        var buffer = ByteBufferAllocator().buffer(capacity: guess)
        buffer.writeJSON(guess: guess) { out in
            out.write("{\"expires_at\":")
            out.write(integer: session.expiresAt)
            out.write(",\"id\":\"")
            session.id.writeText(to: &out)
            out.write("\",\"session\":")
            out.write(string: token)
            out.write(byte: UInt8(ascii: "}"))
        }
        return buffer
    }

}
