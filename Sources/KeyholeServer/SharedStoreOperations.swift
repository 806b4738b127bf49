import KeyholeProtocol
import KeyholeStore
import Logging
import NIOCore

/// The session and user operations over any `SessionStoring` (PROTOCOL.md section 7), as keyholed
/// serves them with `[storage] backend = "postgres"`: each runs in a task and answers once its store
/// answered (a change: once committed). Arguments, limits and answers are `StoreOperations`' own, so
/// that a client sees the same protocol from either backend; the local store keeps its synchronous
/// paths (StoreOperations).
public enum SharedStoreOperations {
    /// The operations on `store`; `now` is the wall clock in seconds. With `revocations`, deleting
    /// one of Apple's users queues the revocation of their grant (in `revocations`' store).
    public static func make(
        store: any SessionStoring, configuration: Reloadable<StoreOperations.Configuration>, revocations: AppleRevocations? = nil,
        now: @escaping @Sendable () -> Int64
    ) -> [String: Operation] {
        @Sendable func principal(_ arguments: inout Arguments) throws(ProtocolError) -> Principal {
            try StoreOperations.principal(&arguments, issuers: configuration.current.issuers)
        }
        @Sendable func stored<Value>(_ body: () async throws(StoreError) -> Value) async throws(ProtocolError) -> Value {
            try await StoreCommit.stored(body)
        }
        return [
            // Answered once committed, through a pending answer the store's call completes: no task
            // waits for it.
            "session.create": .deferrable { request, _ throws(ProtocolError) in
                var arguments = Arguments(request)
                let owner = try principal(&arguments)
                let (ttl, idle, data) = try StoreOperations.sessionParameters(&arguments, configuration.current)
                try arguments.finish()
                let time = now()
                let answer = PendingAnswer()
                store.createSession(for: owner, now: time, ttl: ttl, idle: UInt32(idle), data: data) { outcome in
                    switch outcome {
                    case .success(let created):
                        SessionMetrics.created.increment()
                        answer.complete(.success(.object([
                            "expires_at": .int(created.session.expiresAt), "id": .string(created.session.id.description),
                            "session": .string(created.token),
                        ])))
                    case .failure(let error):
                        answer.complete(.failure(StoreCommit.protocolError(error)))
                    }
                }
                return .pending(answer)
            },
            // Answered on the event loop from the cache while it is fresh, written in place as the
            // local store writes it; a task only to read the database.
            "session.get": .writing { request, _, buffer throws(ProtocolError) in
                var arguments = Arguments(request)
                let tokenBytes = try arguments.stringBytes("session", required: true, maxBytes: 1024)!
                try arguments.finish()
                let time = now()
                // Room made first: the store writes a cached session into it under its cache's lock,
                // and a bigger answer goes the long way rather than grow the buffer there.
                buffer.reserveCapacity(minimumWritableBytes: 1024)
                // The database's answer completed by the store's call, with no task waiting for it
                // (made only then: an answer at once allocates nothing here).
                var pending: PendingAnswer?
                let got = tokenBytes.withUnsafeReadableBytes { token in
                    store.getSession(token: token, now: time, into: &buffer) {
                        // The answer's room is allocated here, on the loop that sends and frees it,
                        // though the database's event loop writes it.
                        let answer = PendingAnswer(reserving: 1024)
                        pending = answer
                        return { outcome in
                            switch outcome {
                            case .success(let found?):
                                answer.complete { found.session.writeGetJSON(user: found.user, to: &$0) }
                            case .success(nil):
                                answer.complete(.failure(.sessionNotFound()))
                            case .failure(let error):
                                answer.complete(.failure(StoreCommit.protocolError(error)))
                            }
                        }
                    }
                }
                switch (got, pending) {
                case (.written, _): return nil
                case (.notFound, _): throw .sessionNotFound()
                case (.later, let answer?): return .pending(answer)
                case (.later, nil): throw .internal("the store would answer later without asking for its completion")
                }
            },
            "session.revoke": .async { request, _ throws(ProtocolError) in
                let (token, idText) = try StoreOperations.revokeArguments(request)
                let time = now()
                let revoked = try await stored { () async throws(StoreError) -> Bool in
                    if let token { return try await store.revokeSession(token: token, now: time) }
                    // An id that cannot be one names no session: the same answer as an unknown one.
                    guard let id = SessionID(text: idText!) else { return false }
                    return try await store.revokeSession(id: id, now: time)
                }
                SessionMetrics.count(revoked ? 1 : 0, in: SessionMetrics.revoked)
                return ["revoked": .bool(revoked)]
            },
            "session.revoke_all": .async { request, _ throws(ProtocolError) in
                var arguments = Arguments(request)
                let owner = try principal(&arguments)
                try arguments.finish()
                let time = now()
                let count = try await stored { () async throws(StoreError) in try await store.revokeSessions(of: owner, now: time) }
                SessionMetrics.count(count, in: SessionMetrics.revokedAll)
                return ["revoked": .int(Int64(count))]
            },
            "session.list": .async { request, _ throws(ProtocolError) in
                var arguments = Arguments(request)
                let owner = try principal(&arguments)
                try arguments.finish()
                let time = now()
                let sessions = try await stored { () async throws(StoreError) in try await store.sessions(of: owner, now: time) }
                return StoreOperations.listJSON(sessions)
            },
            "user.get": .async { request, _ throws(ProtocolError) in
                var arguments = Arguments(request)
                let owner = try principal(&arguments)
                try arguments.finish()
                guard let user = try await stored({ () async throws(StoreError) in try await store.user(owner) }) else {
                    throw .userNotFound(owner.description)
                }
                return user.publicJSON
            },
            "user.update": .async { request, _ throws(ProtocolError) in
                var arguments = Arguments(request)
                let owner = try principal(&arguments)
                let change = try StoreOperations.userChange(&arguments)
                let time = now()
                let updated = try await stored { () async throws(StoreError) in try await store.updateUser(owner, now: time, change) }
                return ["user": .object(updated.user.publicJSON), "created": .bool(updated.created)]
            },
            "user.delete": .async { request, requestContext throws(ProtocolError) in
                var arguments = Arguments(request)
                let owner = try principal(&arguments)
                try arguments.finish()
                let time = now()
                // One of Apple's users: the revocation of their grant queued in the same transaction.
                if let revocations, ExactString.equal(owner.issuer, revocations.issuer) {
                    let answer = try await StoreOperations.deleteAppleUser(owner, now: time, store: revocations.store, revocations: revocations)
                    if answer["deleted"] == true {
                        StoreOperations.logUserDeleted(
                            owner, sessions: answer["sessions_revoked"]?.intValue ?? 0, trigger: "user.delete", logger: requestContext.logger)
                    }
                    return answer
                }
                let deleted = try await stored { () async throws(StoreError) in try await store.deleteUser(owner, now: time) }
                if deleted.deleted {
                    StoreOperations.logUserDeleted(owner, sessions: Int64(deleted.sessions), trigger: "user.delete", logger: requestContext.logger)
                }
                return ["deleted": .bool(deleted.deleted), "sessions_revoked": .int(Int64(deleted.sessions))]
            },
            "admin.snapshot": .sync { request, _ throws(ProtocolError) in
                try Arguments(request).finish()
                throw .notConfigured("snapshots are the local store's: with [storage] backend = \"postgres\", PostgreSQL keeps the data (back it up with its own tools)")
            },
        ]
    }

    /// `session.get`'s answer, as the local store writes it (StoreTables.writeSessionJSON).
    static func sessionJSON(_ session: Session, user: User?) -> [String: JSONValue] {
        var answer: [String: JSONValue] = [
            "id": .string(session.id.description), "issuer": .string(session.principal.issuer), "sub": .string(session.principal.sub),
            "created_at": .int(session.createdAt), "expires_at": .int(session.expiresAt), "last_seen_at": .int(session.lastSeenAt),
            "idle_timeout_s": .int(Int64(session.idleSeconds)), "user": user.map { .object($0.publicJSON) } ?? .null,
        ]
        // As written by the local store: `{}` for none.
        answer["data"] = session.data.flatMap { try? JSONValue.parse(ByteBuffer(bytes: $0)) } ?? .object([:])
        return answer
    }
}
