import Foundation
import KeyholeIssuers
import KeyholeJOSE
import KeyholeProtocol
@testable import KeyholeServer
import NIOCore
import Testing

/// The answer of token.verify, built as an object or encoded straight from the payload's bytes.
@Suite("TokenOperations")
struct TokenOperationsTests {
    static let apple = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("KeyholeJOSETests/Fixtures/apple")

    static let cases = [
        ("apple_token_1.jwt", "apple_jwks_go-pkgz-auth.json"),
        ("apple_token_2.jwt", "apple_jwks_namecare-authcare.json"),
        ("apple_token_4.jwt", "apple_jwks_panva-wellknown-20241001.json"),
        ("apple_token_5.jwt", "apple_jwks_unresolved-ruby-2025.json"),
    ]

    /// A real Apple token, its claims (read unverified), an issuer for its audience, and its key set.
    static func fixture(_ tokenFile: String, _ keySet: String) throws
        -> (token: String, claims: JSONValue, issuer: IssuerConfiguration, keys: JWKSet)
    {
        let token = try String(contentsOf: apple.appendingPathComponent(tokenFile), encoding: .utf8)
            .filter { !$0.isWhitespace }
        let claims = try JSONValue.parse(ByteBuffer(bytes: try CompactJWS.parse(token).payload))
        var issuer = IssuerPreset.apple.configuration(name: "apple", audiences: [claims["aud"]!.stringValue!])
        issuer.keySet = .file("unused")
        return (token, claims, issuer, try KeySetFile.load(apple.appendingPathComponent(keySet).path))
    }

    @Test("the encoded answer is the same JSON as the object answer, whether claims are verbatim or normalised", arguments: cases)
    func encodedAgrees(tokenFile: String, keySet: String) throws {
        let (token, claims, issuer, keys) = try Self.fixture(tokenFile, keySet)
        let registry = IssuerRegistry(issuers: [issuer], keySets: ["apple": keys])
        let verification = try registry.verify(
            token: token, issuer: nil, audience: nil, nonce: nil, now: Double(claims["iat"]!.intValue!) + 60)
        let encoded = try JSONValue.parse(TokenOperations.encode(verification))
        #expect(encoded == .object(TokenOperations.result(verification)))
        // Apple's older tokens carry "true" strings: those claims are normalised, not copied.
        let stringBooleans = claims["email_verified"]?.stringValue != nil
        #expect((verification.payload == nil) == stringBooleans)
        #expect(encoded["claims"]?["email_verified"]?.boolValue != nil || claims["email_verified"] == nil)
        // The envelope around an encoded result is a well-formed response.
        var frame = ByteBuffer()
        Response.encoded(id: .int(7), result: TokenOperations.encode(verification)).write(to: &frame)
        let response = try Response.parse(frame)
        #expect(response.id == .int(7))
        #expect(try response.outcome.get()["sub"] == claims["sub"])
    }

    @Test("a cached token keeps its answer, not its claims, and is still checked on every hit")
    func cachedAnswer() throws {
        let (tokenFile, keySet) = Self.cases[2]
        let (token, claims, issuer, keys) = try Self.fixture(tokenFile, keySet)
        let cache = VerifiedTokenCache()
        let registry = IssuerRegistry(
            issuers: [IssuerKeys(configuration: issuer, keys: keys)], cache: cache, encoder: TokenOperations.encode)
        let now = Double(claims["iat"]!.intValue!) + 60
        let first = try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: now)
        let second = try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: now)
        #expect(cache.statistics.hits == 1)
        #expect(first.encoded != nil && first.encoded == second.encoded)
        #expect(!first.token.claims.isEmpty && second.token.claims.isEmpty)
        #expect(second.token.subject == claims["sub"]?.stringValue)
        // The token says nonce_supported and carries a nonce: a wrong one fails on the hit too.
        #expect(throws: ProtocolError(code: .tokenNonceMismatch, message: "")) {
            try registry.verify(token: token, issuer: nil, audience: nil, nonce: "not it", now: now)
        }
        #expect(cache.statistics.hits == 2)
    }
}
