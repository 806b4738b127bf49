import KeyholeProtocol
import KeyholeStore
import Logging

extension StoreOperations {
    static func userOperations(_ context: Context) -> [String: Operation] {
        let store = context.store
        let now = context.now
        return [
            "user.get": .deferrable { request, _ throws(ProtocolError) in
                var arguments = Arguments(request)
                let principal = try context.principal(&arguments)
                try arguments.finish()
                return try StoreCommit.read(store, { store.user(principal) }) { user in
                    guard let user else { return .failure(.userNotFound(principal.description)) }
                    return .success(.object(user.publicJSON))
                }
            },
            "user.update": .deferrable { request, _ throws(ProtocolError) in
                var arguments = Arguments(request)
                let principal = try context.principal(&arguments)
                let change = try userChange(&arguments)
                let time = now()
                return try StoreCommit.run { done throws(StoreError) in
                    try store.updateUser(principal, now: time, completion: done, change)
                } answer: { updated in
                    .object(["user": .object(updated.user.publicJSON), "created": .bool(updated.created)])
                }
            },
            "user.delete": .deferrable { request, requestContext throws(ProtocolError) in
                var arguments = Arguments(request)
                let principal = try context.principal(&arguments)
                try arguments.finish()
                let time = now()
                let logger = requestContext.logger
                if let revocations = context.revocations, ExactString.equal(principal.issuer, revocations.issuer) {
                    return .later { () async throws(ProtocolError) in
                        let answer = try await deleteAppleUser(principal, now: time, store: store.awaited, revocations: revocations)
                        if answer["deleted"] == true {
                            logUserDeleted(principal, sessions: answer["sessions_revoked"]?.intValue ?? 0, trigger: "user.delete", logger: logger)
                        }
                        return answer
                    }
                }
                return try StoreCommit.run { done throws(StoreError) in
                    try store.deleteUser(principal, now: time, completion: done)
                } answer: { deleted in
                    if deleted.deleted {
                        logUserDeleted(principal, sessions: Int64(deleted.sessions), trigger: "user.delete", logger: logger)
                    }
                    return .object(["deleted": .bool(deleted.deleted), "sessions_revoked": .int(Int64(deleted.sessions))])
                }
            },
        ]
    }

    /// Deletes one of Apple's users with, in the same change, the revocation of their refresh token
    /// queued in the outbox; then tries it. Apple unreachable does not hold the deletion back: the
    /// revocation stays queued, across restarts, until Apple accepts it.
    static func deleteAppleUser(
        _ principal: Principal, now time: Int64, store: any AppleStoring, revocations: AppleRevocations
    ) async throws(ProtocolError) -> [String: JSONValue] {
        let deleted = try await StoreCommit.stored { () async throws(StoreError) in
            try await store.deleteUser(principal, now: time, when: { _ in true }, outbox: AppleRevocations.work)
        }
        var answer: [String: JSONValue] = ["deleted": .bool(deleted.deleted), "sessions_revoked": .int(Int64(deleted.sessions))]
        if let entry = deleted.outbox {
            let revoked = await revocations.attempt(entry)
            if !revoked { revocations.wake() }
            answer["apple_revocation"] = .string(revoked ? "done" : "pending")
        }
        return answer
    }

    /// The audit line for a deletion (once it is durable): who asked is in the logger's metadata
    /// (peer_uid, peer_pid) for a request.
    static func logUserDeleted(_ principal: Principal, sessions: Int64, trigger: String, logger: Logger) {
        SessionMetrics.count(Int(sessions), in: SessionMetrics.userDeleted)
        logger.notice("user.deleted", metadata: [
            "issuer": "\(principal.issuer)", "sub": "\(principal.sub)", "sessions_revoked": "\(sessions)",
            "trigger": "\(trigger)", "audit": "true",
        ])
    }

    /// `user.update`'s `email` and `name` (the rest of its arguments, after `sub` and `issuer`), as
    /// the change to make to the record.
    static func userChange(_ arguments: inout Arguments) throws(ProtocolError) -> @Sendable (inout User) -> Void {
        let email = try optionalString(arguments.value("email"), name: "email", maxBytes: 320)
        let name = try nameChange(arguments.value("name"))
        try arguments.finish()
        guard email != nil || name != nil else { throw .badRequest("nothing to update: give 'email' or 'name'") }
        return { user in
            // null removes a member; a string (or name object) sets it.
            if let email { user.fields["email"] = email.isNull ? nil : email }
            if let name { user.fields["name"] = name.isNull ? nil : name }
        }
    }

    /// A string member that may be `null` (remove it); `nil` when absent.
    static func optionalString(_ value: JSONValue?, name: String, maxBytes: Int) throws(ProtocolError) -> JSONValue? {
        switch value {
        case nil: return nil
        case .null?: return .null
        case .string(let text)? where !text.isEmpty && text.utf8.count <= maxBytes: return .string(text)
        default: throw .badRequest("'\(name)' must be a string of 1 to \(maxBytes) bytes, or null")
        }
    }

    /// `name`: `{given?, family?}` of strings, or `null`.
    static func nameChange(_ value: JSONValue?) throws(ProtocolError) -> JSONValue? {
        switch value {
        case nil: return nil
        case .null?: return .null
        case .object(let members)?:
            var name: [String: JSONValue] = [:]
            for (key, member) in members {
                guard key == "given" || key == "family" else { throw .badRequest("'name' has an unknown member '\(key)'") }
                guard let part = try optionalString(member, name: "name.\(key)", maxBytes: 255), !part.isNull else { continue }
                name[key] = part
            }
            return name.isEmpty ? .null : .object(name)
        default:
            throw .badRequest("'name' must be an object {given?, family?} or null")
        }
    }
}

extension JSONValue {
    var isNull: Bool { if case .null = self { true } else { false } }
}
