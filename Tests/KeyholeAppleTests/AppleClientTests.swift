import AsyncHTTPClient
import KeyholeApple
import KeyholeJOSE
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Testing

/// The REST client against a fake Apple on loopback that checks client secrets as Apple does.
@Suite("Apple client", .ownThreads)
struct AppleClientTests {
    static let http = AppleClient.makeHTTPClient()

    static func client(_ apple: FakeApple, key: SigningKey? = nil, teamID: String? = nil, totalTimeout: TimeAmount? = nil) -> AppleClient {
        let secrets = ClientSecrets(configuration: .init(teamID: teamID ?? apple.teamID, keyID: apple.keyID), key: key ?? apple.teamKey)
        var configuration = AppleClient.Configuration()
        configuration.endpoint = apple.url
        if let totalTimeout { configuration.totalTimeout = totalTimeout }
        return AppleClient(client: http, secrets: secrets, configuration: configuration)
    }

    static func rejection(_ body: () async throws -> Void) async -> AppleError? {
        do {
            try await body()
            return nil
        } catch let error as AppleError {
            return error
        } catch {
            Issue.record("unexpected \(error)")
            return nil
        }
    }

    @Test("a code is exchanged once, for its own client id and redirect URI, and yields Apple's tokens")
    func exchange() async throws {
        let apple = try await FakeApple()
        let client = Self.client(apple)
        let code = apple.issueCode(sub: "001.abc", clientID: "com.example.web", redirectURI: "https://example.com/cb")
        let tokens = try await client.exchangeCode(code, clientID: "com.example.web", redirectURI: "https://example.com/cb")
        #expect(tokens.refreshToken != nil)
        #expect(tokens.accessToken != nil)
        // The id_token is Apple's, for this client and user.
        let jws = try CompactJWS.parse(tokens.idToken!)
        _ = try JWSVerifier(keys: JWKSet(keys: [VerificationKey(jwk: apple.identityKey.publicJWK(kid: apple.identityKeyID))]), algorithms: [.rs256]).verify(jws)
        guard case .object(let claims) = try JSONValue.parse(ByteBuffer(bytes: jws.payload)) else { throw AppleError.unavailable("x", retryAfterMs: 0) }
        #expect(claims["sub"] == .string("001.abc"))
        #expect(claims["aud"] == .string("com.example.web"))
        // What went over the wire: the form Apple documents, secrets never printed by the response.
        let form = try #require(apple.tokenRequests.last)
        #expect(form["grant_type"] == "authorization_code")
        #expect(form["client_id"] == "com.example.web")
        #expect(form["redirect_uri"] == "https://example.com/cb")
        #expect(!tokens.description.contains(tokens.refreshToken!))
        #expect(apple.refusals.isEmpty)

        // Used once: a second exchange is invalid_grant, which is a rejection with a useful message.
        let again = await Self.rejection { _ = try await client.exchangeCode(code, clientID: "com.example.web", redirectURI: "https://example.com/cb") }
        #expect(again == .rejected("invalid_grant", ""))
        #expect(again?.isInvalidGrant == true)
        #expect(again?.message.contains("already used") == true)
        #expect(again?.protocolError.code == .upstreamRejected)
        #expect(again?.protocolError.appleError == "invalid_grant")
        try await apple.close()
    }

    @Test("a code exchanged under another client id or redirect URI is refused")
    func wrongClient() async throws {
        let apple = try await FakeApple()
        let client = Self.client(apple)
        let code = apple.issueCode(sub: "001.abc", clientID: "com.example.app")
        let other = await Self.rejection { _ = try await client.exchangeCode(code, clientID: "com.example.web", redirectURI: nil) }
        #expect(other == .rejected("invalid_grant", ""))
        let web = apple.issueCode(sub: "001.abc", clientID: "com.example.web", redirectURI: "https://example.com/cb")
        let redirect = await Self.rejection { _ = try await client.exchangeCode(web, clientID: "com.example.web", redirectURI: "https://evil.example/cb") }
        #expect(redirect == .rejected("invalid_grant", ""))
        try await apple.close()
    }

    @Test("a secret signed by another key, or naming another team, is invalid_client")
    func invalidClient() async throws {
        let apple = try await FakeApple()
        for client in [Self.client(apple, key: SigningKey()), Self.client(apple, teamID: "OTHERTEAM1")] {
            let code = apple.issueCode(sub: "001.abc", clientID: "com.example.app")
            let error = await Self.rejection { _ = try await client.exchangeCode(code, clientID: "com.example.app", redirectURI: nil) }
            #expect(error == .rejected("invalid_client", ""))
            #expect(error?.message.contains("team_id") == true)
        }
        try await apple.close()
    }

    @Test("Apple down, unreachable, silent or talking nonsense is unavailable, with a retry hint")
    func unavailable() async throws {
        let apple = try await FakeApple()
        let client = Self.client(apple)
        apple.fail(with: .serviceUnavailable, count: 1)
        let down = await Self.rejection { _ = try await client.exchangeCode("x", clientID: "com.example.app", redirectURI: nil) }
        #expect(down == .unavailable("", retryAfterMs: 0))
        #expect(down?.retryAfterMs == 2000)  // the fake's Retry-After: 2
        #expect(down?.protocolError.code == .upstreamUnavailable)
        // 429 is throttling, not a refusal of the request.
        apple.fail(with: .tooManyRequests, count: 1)
        let throttled = await Self.rejection { _ = try await client.exchangeCode("x", clientID: "com.example.app", redirectURI: nil) }
        #expect(throttled == .unavailable("", retryAfterMs: 0))
        try await apple.close()

        // Nothing listening (a port that was just closed, never connected to).
        let closed = try await FakeApple()
        try await closed.close()
        let gone = await Self.rejection { _ = try await Self.client(closed).exchangeCode("x", clientID: "com.example.app", redirectURI: nil) }
        #expect(gone == .unavailable("", retryAfterMs: 0))
        #expect(gone?.retryAfterMs == 5000)

        // A server that never answers is given up on after the total timeout.
        let silent = try await LocalHTTPServer(reply: .init(hang: true))
        var configuration = AppleClient.Configuration()
        configuration.endpoint = silent.url
        configuration.totalTimeout = .milliseconds(300)
        let secrets = ClientSecrets(configuration: .init(teamID: "TEAM123456", keyID: "KEY1234567"), key: SigningKey())
        let hanging = AppleClient(client: Self.http, secrets: secrets, configuration: configuration)
        let timeout = await Self.rejection { _ = try await hanging.exchangeCode("x", clientID: "com.example.app", redirectURI: nil) }
        #expect(timeout == .unavailable("", retryAfterMs: 0))
        #expect(timeout?.message.contains("within 300 ms") == true, "\(String(describing: timeout))")

        // HTTP 200 that is not Apple's JSON, and a 400 without an OAuth error.
        silent.setReply(.init(body: Array("<html>".utf8)))
        let nonsense = await Self.rejection { _ = try await hanging.exchangeCode("x", clientID: "com.example.app", redirectURI: nil) }
        #expect(nonsense == .unavailable("", retryAfterMs: 0))
        silent.setReply(.init(status: .badRequest, body: Array("{\"error\":\"<script>\"}".utf8)))
        let odd = await Self.rejection { _ = try await hanging.exchangeCode("x", clientID: "com.example.app", redirectURI: nil) }
        #expect(odd == .unavailable("", retryAfterMs: 0))
        try await silent.close()
    }

    @Test("a refresh token validates until the user withdraws consent; revocation reaches Apple")
    func refreshAndRevoke() async throws {
        let apple = try await FakeApple()
        let client = Self.client(apple)
        let code = apple.issueCode(sub: "001.abc", clientID: "com.example.app")
        let refreshToken = try #require(try await client.exchangeCode(code, clientID: "com.example.app", redirectURI: nil).refreshToken)
        let checked = try await client.validateRefreshToken(refreshToken, clientID: "com.example.app")
        #expect(checked.idToken != nil)
        #expect(apple.tokenRequests.last?["grant_type"] == "refresh_token")

        apple.withdrawConsent(sub: "001.abc")
        let withdrawn = await Self.rejection { _ = try await client.validateRefreshToken(refreshToken, clientID: "com.example.app") }
        #expect(withdrawn?.isInvalidGrant == true)
        #expect(withdrawn?.message.contains("withdrew consent") == true)

        let second = apple.issueCode(sub: "001.def", clientID: "com.example.app")
        let token = try #require(try await client.exchangeCode(second, clientID: "com.example.app", redirectURI: nil).refreshToken)
        try await client.revoke(token, kind: .refreshToken, clientID: "com.example.app")
        #expect(apple.revoked == [token])
        #expect(apple.refreshTokens[token] == false)
        try await apple.close()
    }
}

/// Team transfer's requests: the migration access token and what Apple's answers may hold.
@Suite("Apple client: team transfer", .ownThreads)
struct AppleClientTransferTests {
    static let web = "com.example.web"

    static func credentialGrants(_ apple: FakeApple) -> Int {
        apple.tokenRequests.filter { $0["grant_type"] == "client_credentials" }.count
    }

    @Test("the migration token is kept past a refused item and dropped when Apple refuses it")
    func migrationToken() async throws {
        let apple = try await FakeApple()
        let client = AppleClientTests.client(apple)
        let transferSub = try await client.transferSub(for: "001.move", target: apple.teamID, clientID: Self.web)
        #expect(apple.transfers[transferSub] == "001.move")
        #expect(Self.credentialGrants(apple) == 1)
        #expect(apple.tokenRequests.last?["scope"] == "user.migration")

        // An unknown identifier is the item's problem, not the token's.
        let unknown = await AppleClientTests.rejection { _ = try await client.transferredUser("t.unknown", clientID: Self.web) }
        #expect(unknown == .rejected("invalid_grant", ""))
        #expect(try await client.transferredUser(transferSub, clientID: Self.web).sub == FakeApple.transferredSub("001.move"))
        #expect(Self.credentialGrants(apple) == 1)

        // A 401 (the token revoked or expired early): the next request gets a new one.
        apple.fail(with: .unauthorized, count: 1)
        let refused = await AppleClientTests.rejection { _ = try await client.transferredUser(transferSub, clientID: Self.web) }
        #expect(refused?.protocolError.code == .upstreamUnavailable)
        #expect(try await client.transferredUser(transferSub, clientID: Self.web).sub == FakeApple.transferredSub("001.move"))
        #expect(Self.credentialGrants(apple) == 2)
        try await apple.close()
    }

    @Test("an identifier from Apple with whitespace, control characters or no content is not taken", arguments: [
        JSONValue.string("t.with\ttab"), .string("t.with\nnewline"), .string("t with space"), .string(""),
        .string(String(repeating: "t", count: 256)), .int(7),
    ])
    func hostileIdentifier(_ answer: JSONValue) async throws {
        let apple = try await FakeApple()
        let client = AppleClientTests.client(apple)
        apple.answerTransferSub(answer)
        let error = await AppleClientTests.rejection { _ = try await client.transferSub(for: "001.move", target: apple.teamID, clientID: Self.web) }
        #expect(error?.protocolError.code == .upstreamUnavailable)
        #expect(error?.message.contains("usable transfer_sub") == true)
        apple.answerTransferSub(nil)
        #expect(try await client.transferSub(for: "001.move", target: apple.teamID, clientID: Self.web).hasPrefix("t"))
        try await apple.close()
    }
}
