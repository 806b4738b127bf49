import Foundation
import KeyholeJOSE
import KeyholeProtocol
import NIOCore
import NIOHTTP1
import Synchronization

/// A fake of Apple's Sign in with Apple service on a real loopback HTTP server, as strict as Apple:
/// client secrets are verified with the public part of the team's key (signature, header, every claim,
/// the six-month limit) by code of its own and the openssl tool, not by the project's verifier
/// (FakeApple+ClientSecret); authorization codes are single use, live 5 minutes and are bound to a
/// client id and redirect URI; identity tokens and notifications are signed RS256 with an RSA key
/// under a kid, as Apple's are, published at `/auth/keys`. It fails on demand.
package final class FakeApple: Sendable {
    /// The team whose client secrets it accepts.
    package let teamID: String
    /// The id of the team's key it accepts client secrets from now (`rotateTeamKey` changes it).
    package var keyID: String { team.withLock { $0.keyID } }
    /// The `.p8` key of the team, for keyholed's configuration (`teamKey.pkcs8PEM()`); the latest
    /// one after `rotateTeamKey`.
    package var teamKey: SigningKey { team.withLock { $0.key } }
    /// The team's key now and the file holding its public half, which client secrets are verified
    /// with.
    let team: Mutex<(keyID: String, key: SigningKey, publicKeyPath: String)>
    /// The key it signs identity tokens and notifications with (RS256), published at `/auth/keys`
    /// under `identityKeyID`.
    package let identityKey: OpenSSLRSAKey
    package let identityKeyID = "fake-apple-rs256"
    /// The key of a forger who signs RS256 under Apple's kid (made when first asked for).
    private let forgerKey = Mutex<OpenSSLRSAKey?>(nil)
    /// The `iss` of its identity tokens: Apple's.
    package static let issuer = "https://appleid.apple.com"

    private let server: LocalHTTPServer
    /// Its files: the team's public keys, and scratch files for openssl.
    let files: URL
    let state = Mutex(State())
    let clock: @Sendable () -> Int64

    /// A code handed out, waiting to be exchanged.
    struct Code {
        var sub: String
        var clientID: String
        var redirectURI: String?
        var issuedAt: Int64
        var claims: [String: JSONValue]
        var used = false
    }

    /// A refresh token handed out.
    struct Grant {
        var sub: String
        var clientID: String
        var valid = true
    }

    struct State {
        var codes: [String: Code] = [:]
        var grants: [String: Grant] = [:]
        /// Access tokens of grant_type client_credentials (scope user.migration), by token: their client.
        var migrationTokens: [String: String] = [:]
        /// Transfer identifiers handed out: the user, the team they go to, and their sub there.
        var transfers: [String: (sub: String, target: String, newSub: String)] = [:]
        /// When set, what the sending side's usermigrationinfo answers as `transfer_sub` (a hostile Apple).
        var transferSubAnswer: JSONValue?
        /// Answer every request with this status (fail on demand), `count` times (nil: until cleared).
        var failure: (status: HTTPResponseStatus, remaining: Int?)?
        /// Refuse every request with this OAuth error (refuse on demand) until cleared.
        var refusal: String?
        var revoked: [String] = []
        var tokenRequests: [[String: String]] = []
        var refusals: [String] = []
        var serial = 0
        /// Client secrets whose signature openssl verified (keyholed sends each one many times).
        var verifiedSecrets: Set<String> = []
    }

    /// Starts the fake on a free loopback port; `now` is its clock (seconds since 1970).
    package init(teamID: String = "TEAM123456", keyID: String = "KEY1234567", now: @escaping @Sendable () -> Int64 = { Int64(Date().timeIntervalSince1970) }) async throws {
        self.teamID = teamID
        self.clock = now
        identityKey = try OpenSSLRSAKey()
        files = try DaemonProcess.makeDirectory()
        team = Mutex(try Self.makeTeamKey(keyID, in: files))
        server = try await LocalHTTPServer()
        let keys = JSONValue.object(["keys": .array([.object(identityKey.publicJWK(kid: identityKeyID))])]).jsonText
        server.setReply(LocalHTTPServer.Reply(body: Array(keys.utf8)), forPath: "/auth/keys")
        server.setResponder(forPath: "/auth/token") { [self] request in self.token(request) }
        server.setResponder(forPath: "/auth/revoke") { [self] request in self.revoke(request) }
        server.setResponder(forPath: "/auth/usermigrationinfo") { [self] request in self.migrationInfo(request) }
    }

    /// A new key for the team under `keyID`, as when a developer revokes the old key in their account
    /// and makes another: from now on only client secrets signed with the new key under its id are
    /// taken. Returns the new key (write its `pkcs8PEM()` where keyholed reads it).
    @discardableResult
    package func rotateTeamKey(keyID: String) throws -> SigningKey {
        let made = try Self.makeTeamKey(keyID, in: files)
        team.withLock { $0 = made }
        state.withLock { $0.verifiedSecrets = [] }
        return made.key
    }

    /// A new team key under `keyID`, with its public half in a file of `directory`: taken from the
    /// .p8 by openssl rather than by KeyholeJOSE.
    private static func makeTeamKey(_ keyID: String, in directory: URL) throws -> (keyID: String, key: SigningKey, publicKeyPath: String) {
        let key = SigningKey()
        let privatePath = directory.appendingPathComponent("AuthKey_\(keyID).p8").path
        let publicPath = directory.appendingPathComponent("team_\(keyID)_\(UUID().uuidString).pub").path
        try Data(key.pkcs8PEM()).write(to: URL(fileURLWithPath: privatePath))
        defer { try? FileManager.default.removeItem(atPath: privatePath) }
        try OpenSSLTool.run(["pkey", "-in", privatePath, "-pubout", "-out", publicPath])
        return (keyID, key, publicPath)
    }

    /// Its base URL, for `[apple] endpoint`.
    package var url: String { server.url }
    /// Its key set's URL, for the apple issuer's `jwks_uri`.
    package var keySetURL: String { server.url + "/auth/keys" }

    package func close() async throws { try await server.close() }

    deinit { try? FileManager.default.removeItem(at: files) }

    /// `claims` signed RS256 with Apple's key, or with a forger's when `forged`.
    private func sign(_ claims: [String: JSONValue], forged: Bool = false) -> String {
        do {
            let key = forged ? try forgerKey.withLock { key in
                if let key { return key }
                let made = try OpenSSLRSAKey()
                key = made
                return made
            } : identityKey
            return try key.signJWT(claims: claims, kid: identityKeyID)
        } catch {
            fatalError("the fake Apple could not sign with openssl: \(error)")
        }
    }

    // MARK: - What tests do

    /// An identity token as Apple signs them, for `audience`.
    package func identityToken(
        sub: String, audience: String, nonce: String? = nil, email: String? = nil,
        emailVerified: JSONValue? = nil, isPrivateEmail: JSONValue? = nil, lifetime: Int64 = 600,
        extra: [String: JSONValue] = [:]
    ) -> String {
        let now = clock()
        var claims: [String: JSONValue] = [
            "iss": .string(Self.issuer), "aud": .string(audience), "sub": .string(sub),
            "iat": .int(now), "exp": .int(now + lifetime), "auth_time": .int(now), "nonce_supported": .bool(true),
        ]
        if let nonce { claims["nonce"] = .string(nonce) }
        if let email { claims["email"] = .string(email) }
        if let emailVerified { claims["email_verified"] = emailVerified }
        if let isPrivateEmail { claims["is_private_email"] = isPrivateEmail }
        claims.merge(extra) { $1 }
        return sign(claims)
    }

    /// A server-to-server notification as Apple POSTs it to the app (`{"payload": this}`): `events`
    /// as a JSON string (Apple's way) or, with `eventsAsObject`, an object; `claims` override the rest.
    /// `forged`: signed by a forger's RSA key under Apple's kid, so that only the signature is wrong.
    package func notification(
        type: String, sub: String, audience: String, event: [String: JSONValue] = [:], eventsAsObject: Bool = false,
        jti: String = UUID().uuidString, lifetime: Int64 = 86_400, claims: [String: JSONValue] = [:], forged: Bool = false
    ) -> String {
        let now = clock()
        var events = event
        events["type"] = .string(type)
        events["sub"] = .string(sub)
        events["event_time"] = .int(now * 1000)
        var buffer = ByteBuffer()
        JSONValue.object(events).write(to: &buffer)
        var payload: [String: JSONValue] = [
            "iss": .string(Self.issuer), "aud": .string(audience), "iat": .int(now), "exp": .int(now + lifetime),
            "jti": .string(jti), "events": eventsAsObject ? .object(events) : .string(String(buffer: buffer)),
        ]
        payload.merge(claims) { $1 }
        return sign(payload, forged: forged)
    }

    /// An authorization code for `sub`, as the app's front end receives it, bound to `clientID` and
    /// (for web clients) `redirectURI`; its exchange returns an id_token with `claims` added.
    package func issueCode(sub: String, clientID: String, redirectURI: String? = nil, claims: [String: JSONValue] = [:]) -> String {
        state.withLock { state in
            state.serial += 1
            let code = "c\(state.serial).\(UUID().uuidString.lowercased())"
            state.codes[code] = Code(sub: sub, clientID: clientID, redirectURI: redirectURI, issuedAt: clock(), claims: claims)
            return code
        }
    }

    /// The user withdraws consent: their refresh tokens stop working.
    package func withdrawConsent(sub: String) {
        state.withLock { state in
            for (token, grant) in state.grants where grant.sub == sub { state.grants[token]?.valid = false }
        }
    }

    /// Answers every request with `status` (`count` times, or until `recover()`).
    package func fail(with status: HTTPResponseStatus = .serviceUnavailable, count: Int? = nil) {
        state.withLock { $0.failure = (status, count) }
    }

    /// Answers the sending side's next usermigrationinfo requests with this `transfer_sub` (nil: a real one).
    package func answerTransferSub(_ value: JSONValue?) { state.withLock { $0.transferSubAnswer = value } }

    /// Stops failing.
    package func recover() {
        state.withLock { state in
            state.failure = nil
            state.refusal = nil
        }
    }

    /// Refuses every request with the OAuth error `error` (HTTP 400), until `recover()`.
    package func refuseAll(with error: String) { state.withLock { $0.refusal = error } }

    /// The tokens revoked so far.
    package var revoked: [String] { state.withLock { $0.revoked } }
    /// The forms of the token requests so far (client secrets included).
    package var tokenRequests: [[String: String]] { state.withLock { $0.tokenRequests } }
    /// Why requests were refused so far (for test failure messages).
    package var refusals: [String] { state.withLock { $0.refusals } }
    /// The refresh tokens handed out and whether each still works.
    package var refreshTokens: [String: Bool] { state.withLock { $0.grants.mapValues(\.valid) } }

    /// The sub a transferred user has in the receiving team.
    package static func transferredSub(_ sub: String) -> String { "002" + sub.dropFirst(3) }

    /// The transfer identifiers handed out so far, and the sub each stands for.
    package var transfers: [String: String] { state.withLock { $0.transfers.mapValues(\.sub) } }

    /// How many HTTP requests reached the fake so far, on any path.
    package var requestCount: Int { server.received.count }

    /// The paths of the HTTP requests so far, in order of arrival.
    package var requestPaths: [String] { server.received.map(\.uri) }

    /// Returns once at least `count` HTTP requests in all reached the fake.
    package func waitForRequests(_ count: Int) async { await server.waitForRequests(count) }
}
