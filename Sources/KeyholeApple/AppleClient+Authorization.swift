extension AppleClient.Configuration {
    /// Where a browser is sent to sign in with Apple on the web (APPLE_WEB.md): Apple's authorization
    /// endpoint, `/auth/authorize` under `endpoint`, asking for a code and an identity token
    /// (`response_type=code id_token`) POSTed back to `redirectURI` (`response_mode=form_post`, which
    /// Apple requires whenever a scope is asked for).
    ///
    /// Every value is percent-encoded (unreserved characters as they are, every other byte `%XX`,
    /// a space `%20`), so neither a configured value nor `state` and `nonce` can add a parameter.
    /// `scope`: empty for none, else `name`, `email` or both, separated by a space.
    public func authorizationURL(clientID: String, redirectURI: String, scope: String, state: String, nonce: String) -> String {
        var query: [(String, String)] = [
            ("client_id", clientID), ("redirect_uri", redirectURI), ("response_type", "code id_token"),
            ("response_mode", "form_post"),
        ]
        if !scope.isEmpty { query.append(("scope", scope)) }
        query += [("state", state), ("nonce", nonce)]
        let base = endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint
        return base + "/auth/authorize?" + AppleClient.formEncode(query)
    }
}
