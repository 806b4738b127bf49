import KeyholeApple
import KeyholeJOSE
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Testing

/// Client secrets as Apple checks them: signature, header and every claim, and their renewal.
@Suite("Client secrets")
struct ClientSecretsTests {
    static let start = 1_800_000_000.0
    static let key = SigningKey()

    static func secrets(_ clock: ManualClock, lifetime: Int64? = nil, renewBefore: Int64? = nil) -> ClientSecrets {
        var configuration = ClientSecrets.Configuration(teamID: "TEAM123456", keyID: "KEY1234567")
        if let lifetime { configuration.lifetime = lifetime }
        if let renewBefore { configuration.renewBefore = renewBefore }
        return ClientSecrets(configuration: configuration, key: key, clock: clock)
    }

    /// The verified claims of `secret`, checked against the public part of the key.
    static func claims(_ secret: String) throws -> [String: JSONValue] {
        let jws = try CompactJWS.parse(secret)
        #expect(jws.algorithm == "ES256")
        #expect(jws.keyID == "KEY1234567")
        let verifier = JWSVerifier(keys: JWKSet(keys: [try VerificationKey(jwk: key.publicJWK(kid: "KEY1234567"))]), algorithms: [.es256])
        _ = try verifier.verify(jws)
        guard case .object(let claims) = try JSONValue.parse(ByteBuffer(bytes: jws.payload)) else {
            throw JOSEError.malformed("payload is not an object")
        }
        return claims
    }

    @Test("a secret is signed by the team's key and carries Apple's claims, iat a minute back")
    func claims() throws {
        let clock = ManualClock(now: Self.start + 0.7)
        let secret = try Self.secrets(clock).secret(for: "com.example.web")
        let claims = try Self.claims(secret)
        #expect(claims["iss"] == .string("TEAM123456"))
        #expect(claims["sub"] == .string("com.example.web"))
        #expect(claims["aud"] == .string("https://appleid.apple.com"))
        #expect(claims["iat"] == .int(Int64(Self.start) - 60))
        #expect(claims["exp"] == .int(Int64(Self.start) - 60 + 30 * 86_400))
        #expect(claims.count == 5)
        // A secret made with another key does not verify under this one.
        let other = ClientSecrets(configuration: .init(teamID: "TEAM123456", keyID: "KEY1234567"), key: SigningKey(), clock: clock)
        #expect(throws: JOSEError.self) { try Self.claims(other.secret(for: "com.example.web")) }
    }

    @Test("exp is never more than 15 777 000 s after iat, whatever the configuration says")
    func lifetimeCap() throws {
        let clock = ManualClock(now: Self.start)
        let claims = try Self.claims(Self.secrets(clock, lifetime: 365 * 86_400).secret(for: "com.example.app"))
        guard case .int(let iat)? = claims["iat"], case .int(let exp)? = claims["exp"] else {
            Issue.record("iat and exp are integers")
            return
        }
        #expect(exp - iat == 15_777_000)
    }

    @Test("a secret is reused per client id until a day before it expires, then replaced")
    func renewal() throws {
        let clock = ManualClock(now: Self.start)
        let secrets = Self.secrets(clock)
        let web = try secrets.secret(for: "com.example.web")
        let app = try secrets.secret(for: "com.example.app")
        #expect(web != app)
        #expect(try Self.claims(app)["sub"] == .string("com.example.app"))
        clock.advance(by: 29 * 86_400 - 61)
        #expect(try secrets.secret(for: "com.example.web") == web)
        clock.advance(by: 1)
        let renewed = try secrets.secret(for: "com.example.web")
        #expect(renewed != web)
        #expect(try Self.claims(renewed)["iat"] == .int(Int64(Self.start) + 29 * 86_400 - 60 - 60))
        #expect(try secrets.secret(for: "com.example.web") == renewed)
    }

    @Test("a short lifetime renews at half of it, not on every request")
    func shortLifetime() throws {
        let clock = ManualClock(now: Self.start)
        let secrets = Self.secrets(clock, lifetime: 3_600)
        let first = try secrets.secret(for: "com.example.web")
        clock.advance(by: 1_700)
        #expect(try secrets.secret(for: "com.example.web") == first)
        clock.advance(by: 100)
        #expect(try secrets.secret(for: "com.example.web") != first)
    }

    @Test("with no renewal margin (or a negative one) a secret is still never served past its exp", arguments: [0, -86_400] as [Int64])
    func noMargin(renewBefore: Int64) throws {
        let clock = ManualClock(now: Self.start)
        let secrets = Self.secrets(clock, lifetime: 3_600, renewBefore: renewBefore)
        let first = try secrets.secret(for: "com.example.web")
        clock.advance(by: 3_600 - 61)
        #expect(try secrets.secret(for: "com.example.web") == first)
        clock.advance(by: 1)
        let second = try secrets.secret(for: "com.example.web")
        #expect(second != first)
        guard case .int(let exp)? = try Self.claims(second)["exp"] else {
            Issue.record("exp is an integer")
            return
        }
        #expect(exp > Int64(clock.now()))
    }
}
