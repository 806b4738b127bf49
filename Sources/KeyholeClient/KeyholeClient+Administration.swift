import KeyholeProtocol

/// Typed helpers for key sets, Sign in with Apple and administration (PROTOCOL.md section 7). Debug
/// operations go through `call`.
extension KeyholeClient {
    /// `jwks.status`: every issuer's key set (or only `issuer`'s).
    public func jwksStatus(issuer: String? = nil) async throws -> [String: JSONValue] {
        try await call("jwks.status", args: Self.args([:], issuer: issuer, [:]))
    }

    /// `jwks.refresh` (admin group): fetches remote key sets now; each issuer with its `outcome`.
    public func refreshJWKS(issuer: String? = nil) async throws -> [String: JSONValue] {
        try await call("jwks.refresh", args: Self.args([:], issuer: issuer, [:]))
    }

    /// `apple.sign_in`: verifies the identity token, exchanges the code when given, updates the user
    /// and creates a session. Result: `{created, user, session}`;
    /// `result["session"]?.objectValue.flatMap(CreatedSession.init)` reads the session.
    /// - Parameters:
    ///   - user: `{email?, name?: {given?, family?}}`, what Apple gives web flows on the first sign-in.
    ///   - session: `{ttl_s?, idle_s?, data?}`, as `session.create`.
    public func appleSignIn(
        identityToken: String, authorizationCode: String? = nil, clientID: String? = nil, nonce: String? = nil,
        user: [String: JSONValue]? = nil, session: [String: JSONValue]? = nil
    ) async throws -> [String: JSONValue] {
        var args = Self.args(
            ["identity_token": .string(identityToken)], issuer: nil,
            ["authorization_code": authorizationCode, "client_id": clientID, "nonce": nonce])
        if let user { args["user"] = .object(user) }
        if let session { args["session"] = .object(session) }
        return try await call("apple.sign_in", args: args)
    }

    /// `apple.authorize`: starts Sign in with Apple on the web. Result: `{url, state, expires_at,
    /// cookie: {name, value, max_age, set_cookie}}`: set the cookie as `set_cookie` says, then send
    /// the browser to `url`.
    /// - Parameters:
    ///   - returnTo: where the browser goes once signed in: a path on the site (default `/`), or a URL
    ///     on an origin of `[apple] web_return_origins`.
    public func appleAuthorize(
        clientID: String? = nil, redirectURI: String? = nil, scope: String? = nil, returnTo: String? = nil
    ) async throws -> [String: JSONValue] {
        try await call(
            "apple.authorize",
            args: Self.args([:], issuer: nil, ["client_id": clientID, "redirect_uri": redirectURI, "scope": scope, "return_to": returnTo]))
    }

    /// `apple.callback`: completes a web sign-in from Apple's form_post. Result: `apple.sign_in`'s, and
    /// `return_to`.
    /// - Parameters:
    ///   - form: the fields Apple POSTed to the redirect URI (`state`, `code`, `id_token`, `user`, or `error`).
    ///   - cookie: the binding cookie's value, as the browser sent it.
    ///   - session: `{ttl_s?, idle_s?, data?}`, as `session.create`.
    public func appleCallback(form: [String: String], cookie: String, session: [String: JSONValue]? = nil) async throws -> [String: JSONValue] {
        var args: [String: JSONValue] = ["form": .object(form.mapValues(JSONValue.string)), "cookie": .string(cookie)]
        if let session { args["session"] = .object(session) }
        return try await call("apple.callback", args: args)
    }

    /// `apple.notification`: applies Apple's server-to-server notification (the `payload` JWT of the
    /// body Apple POSTs). Result: `{type, sub, applied, duplicate}`.
    public func appleNotification(payload: String) async throws -> [String: JSONValue] {
        try await call("apple.notification", args: ["payload": .string(payload)])
    }

    /// `apple.refresh_check` (admin group): checks the user's refresh token at Apple now.
    public func appleRefreshCheck(sub: String) async throws -> [String: JSONValue] {
        try await call("apple.refresh_check", args: ["sub": .string(sub)])
    }

    /// `apple.transfer.export` (admin group): the user's transfer identifier for `targetTeamID`.
    public func appleTransferExport(sub: String, targetTeamID: String, clientID: String? = nil) async throws -> [String: JSONValue] {
        try await call(
            "apple.transfer.export",
            args: Self.args(["sub": .string(sub), "target_team_id": .string(targetTeamID)], issuer: nil, ["client_id": clientID]))
    }

    /// `apple.transfer.import` (admin group): moves the user of `transferSub` to their new sub.
    public func appleTransferImport(transferSub: String, clientID: String? = nil) async throws -> [String: JSONValue] {
        try await call("apple.transfer.import", args: Self.args(["transfer_sub": .string(transferSub)], issuer: nil, ["client_id": clientID]))
    }

    /// `apple.pending` (admin group): revocations at Apple still owed for deleted users.
    public func applePending() async throws -> [String: JSONValue] {
        try await call("apple.pending")
    }

    /// `admin.snapshot` (admin group): writes a snapshot and answers once it is durable.
    public func snapshot() async throws -> [String: JSONValue] {
        try await call("admin.snapshot")
    }

    /// `admin.reload` (admin group): reads the configuration file again. Result: `{applied, needs_restart}`.
    public func reload() async throws -> [String: JSONValue] {
        try await call("admin.reload")
    }
}
