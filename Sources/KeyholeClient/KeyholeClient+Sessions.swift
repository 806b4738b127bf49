import KeyholeProtocol

/// Typed helpers for the operations every app uses: `ping`, `stats`, tokens, sessions and users
/// (PROTOCOL.md section 7). Each throws as `call` does: `ProtocolError` for keyholed's error answers,
/// `KeyholeClientError` for the client's own. `issuer` may be left out where keyholed has one issuer.
extension KeyholeClient {
    /// `ping`: keyholed's protocol, version and uptime.
    public func ping() async throws -> PingResult {
        let result = try await call("ping")
        guard let protocolVersion = result["protocol"]?.intValue, let version = result["version"]?.stringValue,
            let uptime = result["uptime_ms"]?.intValue
        else { throw KeyholeClientError.protocolError("ping result lacks protocol, version or uptime_ms") }
        return PingResult(protocolVersion: Int(protocolVersion), version: version, uptimeMs: uptime)
    }

    /// `stats`: keyholed's counters (admin group).
    public func stats() async throws -> [String: JSONValue] {
        try await call("stats")
    }

    /// `token.verify`: verifies an identity token; the result has `issuer`, `sub`, `aud`, `exp`, `claims`...
    public func verifyToken(
        _ token: String, issuer: String? = nil, audience: String? = nil, nonce: String? = nil
    ) async throws -> [String: JSONValue] {
        try await call("token.verify", args: Self.args(["token": .string(token)], issuer: issuer, ["audience": audience, "nonce": nonce]))
    }

    /// `session.create`: a new session for the user (made if new); the token is in the result only.
    public func createSession(
        sub: String, issuer: String? = nil, ttlSeconds: Int? = nil, idleSeconds: Int? = nil,
        data: [String: JSONValue]? = nil
    ) async throws -> CreatedSession {
        var args = Self.args(["sub": .string(sub)], issuer: issuer, [:])
        if let ttlSeconds { args["ttl_s"] = .int(Int64(ttlSeconds)) }
        if let idleSeconds { args["idle_s"] = .int(Int64(idleSeconds)) }
        if let data { args["data"] = .object(data) }
        let result = try await call("session.create", args: args)
        guard let session = CreatedSession(result) else {
            throw KeyholeClientError.protocolError("session.create result lacks session, id or expires_at")
        }
        return session
    }

    /// `session.get`: the live session of `token` (`id`, `issuer`, `sub`, times, `data`, `user`);
    /// `session_not_found` when it is unknown, expired or revoked.
    public func getSession(_ token: String) async throws -> [String: JSONValue] {
        try await call("session.get", args: ["session": .string(token)])
    }

    /// `session.revoke` by token: whether a live session was revoked.
    @discardableResult
    public func revokeSession(token: String) async throws -> Bool {
        try await call("session.revoke", args: ["session": .string(token)])["revoked"]?.boolValue ?? false
    }

    /// `session.revoke` by id: whether a live session was revoked.
    @discardableResult
    public func revokeSession(id: String) async throws -> Bool {
        try await call("session.revoke", args: ["id": .string(id)])["revoked"]?.boolValue ?? false
    }

    /// `session.revoke_all`: revokes every session of the user; how many there were.
    @discardableResult
    public func revokeAllSessions(sub: String, issuer: String? = nil) async throws -> Int {
        Int(try await call("session.revoke_all", args: Self.args(["sub": .string(sub)], issuer: issuer, [:]))["revoked"]?.intValue ?? 0)
    }

    /// `session.list`: the user's live sessions, oldest first (`id`, `created_at`, `expires_at`,
    /// `last_seen_at`; never tokens).
    public func listSessions(sub: String, issuer: String? = nil) async throws -> [[String: JSONValue]] {
        let result = try await call("session.list", args: Self.args(["sub": .string(sub)], issuer: issuer, [:]))
        return (result["sessions"]?.arrayValue ?? []).compactMap(\.objectValue)
    }

    /// `user.get`: the user's record; `user_not_found` when there is none.
    public func getUser(sub: String, issuer: String? = nil) async throws -> [String: JSONValue] {
        try await call("user.get", args: Self.args(["sub": .string(sub)], issuer: issuer, [:]))
    }

    /// `user.update` (admin group): sets or removes the user's `email` and `name`, making the record
    /// when missing. `nil` leaves a member as it is; `.null` removes it. Result: `{user, created}`.
    public func updateUser(
        sub: String, issuer: String? = nil, email: JSONValue? = nil, name: JSONValue? = nil
    ) async throws -> [String: JSONValue] {
        var args = Self.args(["sub": .string(sub)], issuer: issuer, [:])
        if let email { args["email"] = email }
        if let name { args["name"] = name }
        return try await call("user.update", args: args)
    }

    /// `user.delete` (admin group): the user's record and every session of theirs. Result:
    /// `{deleted, sessions_revoked}` (and `apple_revocation` for Apple users with a refresh token).
    public func deleteUser(sub: String, issuer: String? = nil) async throws -> [String: JSONValue] {
        try await call("user.delete", args: Self.args(["sub": .string(sub)], issuer: issuer, [:]))
    }

    /// `base` plus `issuer` and the optional string members that are set.
    static func args(_ base: [String: JSONValue], issuer: String?, _ optional: [String: String?]) -> [String: JSONValue] {
        var args = base
        if let issuer { args["issuer"] = .string(issuer) }
        for (name, value) in optional { if let value { args[name] = .string(value) } }
        return args
    }
}
