import Foundation
import KeyholeProtocol
import NIOCore
import NIOHTTP1

extension FakeApple {
    /// `/auth/token`: authorization_code and refresh_token grants.
    func token(_ request: LocalHTTPServer.Received) -> LocalHTTPServer.Reply {
        let form = Self.parseForm(request.body)
        state.withLock { $0.tokenRequests.append(form) }
        if let failure = takeFailure() { return failure }
        guard request.method == .POST else { return refuse("invalid_request", "not a POST") }
        guard request.headers.first(name: "Content-Type")?.hasPrefix("application/x-www-form-urlencoded") == true else {
            return refuse("invalid_request", "not a form")
        }
        guard let clientID = form["client_id"], let secret = form["client_secret"] else {
            return refuse("invalid_request", "client_id or client_secret missing")
        }
        if let problem = checkClientSecret(secret, clientID: clientID) { return refuse("invalid_client", problem) }
        let now = clock()
        switch form["grant_type"] {
        case "authorization_code":
            guard let code = form["code"] else { return refuse("invalid_request", "code missing") }
            let outcome = state.withLock { state -> Result<Code, FakeRefusal> in
                guard var grant = state.codes[code] else { return .failure(FakeRefusal("invalid_grant", "unknown code")) }
                guard !grant.used else { return .failure(FakeRefusal("invalid_grant", "code used twice")) }
                grant.used = true
                state.codes[code] = grant
                guard now - grant.issuedAt <= 300 else { return .failure(FakeRefusal("invalid_grant", "code expired")) }
                guard grant.clientID == clientID else { return .failure(FakeRefusal("invalid_grant", "code of another client id")) }
                guard grant.redirectURI == form["redirect_uri"] else {
                    return .failure(FakeRefusal("invalid_grant", "redirect_uri \(form["redirect_uri"] ?? "none") differs"))
                }
                return .success(grant)
            }
            switch outcome {
            case .failure(let refusal): return refuse(refusal.error, refusal.reason)
            case .success(let grant):
                let refreshToken = "r\(UUID().uuidString.lowercased()).0.fake"
                state.withLock { $0.grants[refreshToken] = Grant(sub: grant.sub, clientID: clientID) }
                let idToken = identityToken(sub: grant.sub, audience: clientID, extra: grant.claims)
                return Self.json([
                    "access_token": .string("a\(UUID().uuidString.lowercased())"), "token_type": .string("Bearer"),
                    "expires_in": .int(3600), "refresh_token": .string(refreshToken), "id_token": .string(idToken),
                ])
            }
        case "refresh_token":
            guard let token = form["refresh_token"] else { return refuse("invalid_request", "refresh_token missing") }
            guard let grant = state.withLock({ $0.grants[token] }), grant.valid, grant.clientID == clientID else {
                return refuse("invalid_grant", "refresh token unknown, revoked or of another client")
            }
            return Self.json([
                "access_token": .string("a\(UUID().uuidString.lowercased())"), "token_type": .string("Bearer"),
                "expires_in": .int(3600), "id_token": .string(identityToken(sub: grant.sub, audience: clientID)),
            ])
        case "client_credentials":
            guard form["scope"] == "user.migration" else { return refuse("invalid_scope", "scope \(form["scope"] ?? "none")") }
            let accessToken = "m\(UUID().uuidString.lowercased())"
            state.withLock { $0.migrationTokens[accessToken] = clientID }
            return Self.json(["access_token": .string(accessToken), "token_type": "Bearer", "expires_in": .int(3600)])
        default:
            return refuse("unsupported_grant_type", "grant_type \(form["grant_type"] ?? "none")")
        }
    }

    /// `/auth/usermigrationinfo`: with `sub` and `target`, the sending team gets a transfer
    /// identifier; with `transfer_sub`, the receiving team (this fake's own team) gets the user's sub.
    func migrationInfo(_ request: LocalHTTPServer.Received) -> LocalHTTPServer.Reply {
        let form = Self.parseForm(request.body)
        if let failure = takeFailure() { return failure }
        guard let clientID = form["client_id"], let secret = form["client_secret"] else {
            return refuse("invalid_request", "client_id or client_secret missing")
        }
        if let problem = checkClientSecret(secret, clientID: clientID) { return refuse("invalid_client", problem) }
        guard let authorization = request.headers.first(name: "Authorization"), authorization.hasPrefix("Bearer "),
            state.withLock({ $0.migrationTokens[String(authorization.dropFirst(7))] }) == clientID
        else { return refuse("invalid_client", "no Bearer access token of scope user.migration for this client") }
        if let sub = form["sub"], let target = form["target"] {
            guard target.utf8.count == 10 else { return refuse("invalid_request", "target is not a team id") }
            let transferSub = "t\(abs(sub.hashValue ^ target.hashValue)).\(sub.count)"
            let answer = state.withLock { state in
                state.transfers[transferSub] = (sub, target, Self.transferredSub(sub))
                return state.transferSubAnswer ?? .string(transferSub)
            }
            return Self.json(["transfer_sub": answer])
        }
        if let transferSub = form["transfer_sub"] {
            guard let transfer = state.withLock({ $0.transfers[transferSub] }), transfer.target == teamID else {
                return refuse("invalid_grant", "unknown transfer_sub, or not for this team")
            }
            return Self.json(["sub": .string(transfer.newSub), "email": .string("\(transfer.newSub)@privaterelay.appleid.com"), "is_private_email": true])
        }
        return refuse("invalid_request", "give sub and target, or transfer_sub")
    }

    /// `/auth/revoke`.
    func revoke(_ request: LocalHTTPServer.Received) -> LocalHTTPServer.Reply {
        let form = Self.parseForm(request.body)
        if let failure = takeFailure() { return failure }
        guard let clientID = form["client_id"], let secret = form["client_secret"], let token = form["token"] else {
            return refuse("invalid_request", "client_id, client_secret or token missing")
        }
        if let problem = checkClientSecret(secret, clientID: clientID) { return refuse("invalid_client", problem) }
        state.withLock { state in
            state.revoked.append(token)
            if state.grants[token]?.clientID == clientID { state.grants[token]?.valid = false }
        }
        return LocalHTTPServer.Reply(status: .ok, body: [])
    }

    private func takeFailure() -> LocalHTTPServer.Reply? {
        if let error = state.withLock({ $0.refusal }) { return refuse(error, "refused on demand") }
        return state.withLock { state -> LocalHTTPServer.Reply? in
            guard let failure = state.failure else { return nil }
            if let remaining = failure.remaining {
                state.failure = remaining <= 1 ? nil : (failure.status, remaining - 1)
            }
            return LocalHTTPServer.Reply(status: failure.status, headers: [("Retry-After", "2")], body: Array("down".utf8))
        }
    }

    private func refuse(_ error: String, _ reason: String) -> LocalHTTPServer.Reply {
        state.withLock { $0.refusals.append("\(error): \(reason)") }
        return LocalHTTPServer.Reply(status: .badRequest, body: Array(JSONValue.object(["error": .string(error)]).jsonText.utf8))
    }

    private static func json(_ members: [String: JSONValue]) -> LocalHTTPServer.Reply {
        LocalHTTPServer.Reply(body: Array(JSONValue.object(members).jsonText.utf8))
    }

    /// `a=b&c=d`, percent-decoded, `+` as space.
    static func parseForm(_ body: [UInt8]) -> [String: String] {
        var form: [String: String] = [:]
        for pair in String(decoding: body, as: UTF8.self).split(separator: "&") {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            func decode(_ text: Substring) -> String {
                text.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? String(text)
            }
            form[decode(parts[0])] = parts.count > 1 ? decode(parts[1]) : ""
        }
        return form
    }
}

struct FakeRefusal: Error {
    var error: String
    var reason: String
    init(_ error: String, _ reason: String) {
        self.error = error
        self.reason = reason
    }
}
