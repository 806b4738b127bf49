import Foundation
import KeyholeJOSE
import KeyholeProtocol
import Testing

/// The five real Sign in with Apple identity tokens of Fixtures/apple through `JWTVerifier`, with the key
/// sets that hold their keys and a fixed clock (they have all expired).
@Suite("Sign in with Apple: real tokens")
struct AppleTokenTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/apple")
    static let issuer = "https://appleid.apple.com"

    struct Vector: Sendable, CustomTestStringConvertible {
        var number: Int
        var keySet: String
        var issuedAt: Double
        var audience: String
        var lifetime: Double
        var realUserStatus: Int64?
        var nonceSupported: Bool
        var testDescription: String { "apple_token_\(number)" }
    }

    /// The README's table, plus what each payload holds.
    static let vectors: [Vector] = [
        Vector(
            number: 1, keySet: "apple_jwks_go-pkgz-auth.json", issuedAt: 1_581_981_140,
            audience: "com.gargoylesoft.SignInWithApple", lifetime: 600, realUserStatus: nil, nonceSupported: false),
        Vector(
            number: 2, keySet: "apple_jwks_namecare-authcare.json", issuedAt: 1_649_423_733,
            audience: "com.raywenderlich.TILiOS", lifetime: 86_400, realUserStatus: 2, nonceSupported: true),
        Vector(
            number: 3, keySet: "apple_jwks_namecare-authcare.json", issuedAt: 1_708_429_276,
            audience: "dev.timc.siwa-demo.TILiOS", lifetime: 86_400, realUserStatus: 2, nonceSupported: true),
        Vector(
            number: 4, keySet: "apple_jwks_panva-wellknown-20241001.json", issuedAt: 1_730_673_618,
            audience: "dev.timc.siwa-demo.TILiOS", lifetime: 86_400, realUserStatus: nil, nonceSupported: true),
        Vector(
            number: 5, keySet: "apple_jwks_unresolved-ruby-2025.json", issuedAt: 1_738_495_919,
            audience: "dev.timc.siwa-demo.TILiOS", lifetime: 86_400, realUserStatus: 0, nonceSupported: true),
    ]

    static func token(_ number: Int) throws -> String {
        let text = try String(contentsOf: fixtures.appendingPathComponent("apple_token_\(number).jwt"), encoding: .utf8)
        return text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    static func keys(_ name: String) throws -> JWKSet {
        try JWKSet(json: Array(try Data(contentsOf: fixtures.appendingPathComponent(name))))
    }

    static func verifier(
        _ vector: Vector, keySet: String? = nil, audiences: Set<String>? = nil, profile: ClaimsProfile = .apple,
        algorithms: Set<JWSAlgorithm> = [.rs256], allowsMissingNonce: Bool = false
    ) throws -> JWTVerifier {
        JWTVerifier(
            keys: try keys(keySet ?? vector.keySet), algorithms: algorithms,
            policy: ClaimsPolicy(
                issuer: issuer, audiences: audiences ?? [vector.audience], profile: profile, allowsMissingNonce: allowsMissingNonce))
    }

    @Test("every real token verifies with its key set at iat + 60, normalised by the Apple profile", arguments: vectors)
    func verifies(vector: Vector) throws {
        let now = vector.issuedAt + 60
        let token = try Self.verifier(vector).verify(try Self.token(vector.number), now: now)
        #expect(token.issuer == Self.issuer)
        #expect(token.subject.hasPrefix("00"))
        #expect(token.audiences == [vector.audience])
        #expect(token.issuedAt == vector.issuedAt)
        #expect(token.expiresAt == vector.issuedAt + vector.lifetime)
        #expect(token.email?.isEmpty == false)
        // "true" strings in tokens 1-2 and booleans in 3-5 all become booleans.
        #expect(token.emailVerified == true)
        #expect(token.isPrivateEmail == true)
        #expect(token.claims["email_verified"] == .bool(true))
        #expect(token.claims["is_private_email"] == .bool(true))
        #expect(token.realUserStatus == vector.realUserStatus)
        #expect(token.claims["real_user_status"] == vector.realUserStatus.map(JSONValue.int))
        // Claims the verifier does not know pass through.
        #expect(token.claims["c_hash"]?.stringValue != nil)
        #expect(token.claims["auth_time"]?.intValue == Int64(vector.issuedAt))
        // The request may name the audience it expects.
        let named = try Self.verifier(vector).verify(try Self.token(vector.number), now: now, audience: vector.audience)
        #expect(named == token)
    }

    @Test("the request's nonce: no token without one passes; with allow_missing_nonce token 1 does, those saying nonce_supported never", arguments: vectors)
    func nonceWithoutTokenNonce(vector: Vector) throws {
        let token = try Self.token(vector.number)
        for allowed in [false, true] {
            let verifier = try Self.verifier(vector, allowsMissingNonce: allowed)
            let verify = { () throws(JOSEError) in
                _ = try verifier.verify(token, now: vector.issuedAt + 60, nonce: "n-0S6_WzA2Mj")
            }
            if vector.nonceSupported || !allowed {
                #expect(throws: JOSEError(.tokenNonceMismatch, "")) { try verify() }
            } else {
                #expect(throws: Never.self) { try verify() }
            }
        }
    }

    @Test("token 4 against the June 2024 snapshot: its kid is unknown")
    func outdatedKeySet() throws {
        let vector = Self.vectors[3]
        let verifier = try Self.verifier(vector, keySet: "apple_jwks_panva-wellknown-20240605.json")
        #expect(throws: JOSEError(.tokenKeyUnknown, "")) {
            try verifier.verify(try Self.token(4), now: vector.issuedAt + 60)
        }
    }

    @Test("token 4 is expired at exp + 61 and at exp + 60, valid at exp + 59")
    func expiry() throws {
        let vector = Self.vectors[3]
        let verifier = try Self.verifier(vector)
        let exp = vector.issuedAt + vector.lifetime
        #expect(throws: JOSEError(.tokenExpired, "")) { try verifier.verify(try Self.token(4), now: exp + 61) }
        #expect(throws: JOSEError(.tokenExpired, "")) { try verifier.verify(try Self.token(4), now: exp + 60) }
        #expect(try verifier.verify(try Self.token(4), now: exp + 59).expiresAt == exp)
    }

    @Test("a wrong audience, configured or requested, fails")
    func wrongAudience() throws {
        let vector = Self.vectors[3]
        let now = vector.issuedAt + 60
        let other = try Self.verifier(vector, audiences: ["com.example.other"])
        #expect(throws: JOSEError(.tokenAudienceInvalid, "")) { try other.verify(try Self.token(4), now: now) }
        // Token's audience configured, but the request names another configured one.
        let both = try Self.verifier(vector, audiences: [vector.audience, "com.example.other"])
        #expect(try both.verify(try Self.token(4), now: now).subject.isEmpty == false)
        #expect(throws: JOSEError(.tokenAudienceInvalid, "")) {
            try both.verify(try Self.token(4), now: now, audience: "com.example.other")
        }
        // The request names the token's audience, but it is not configured.
        #expect(throws: JOSEError(.tokenAudienceInvalid, "")) {
            try other.verify(try Self.token(4), now: now, audience: vector.audience)
        }
    }

    @Test("RS256 off the allow-list is refused before any key is looked at")
    func algorithmNotAllowed() throws {
        let vector = Self.vectors[3]
        let verifier = try Self.verifier(vector, algorithms: [.ps256, .es256])
        #expect(throws: JOSEError(.tokenAlgNotAllowed, "")) {
            try verifier.verify(try Self.token(4), now: vector.issuedAt + 60)
        }
    }

    @Test("a real token whose payload is altered fails its signature check")
    func alteredPayload() throws {
        let vector = Self.vectors[4]
        let segments = try Self.token(5).split(separator: ".").map(String.init)
        let payload = try #require(Base64URL.decode(segments[1]))
        let text = String(decoding: payload, as: UTF8.self)
        let forged = text.replacingOccurrences(of: #""real_user_status":0"#, with: #""real_user_status":2"#)
        #expect(forged != text)
        let altered = [segments[0], Base64URL.encode(Array(forged.utf8)), segments[2]].joined(separator: ".")
        #expect(throws: JOSEError(.tokenSignatureInvalid, "")) {
            try Self.verifier(vector).verify(altered, now: vector.issuedAt + 60)
        }
    }

    @Test("under the standard profile Apple's string booleans stay strings and are not reported")
    func standardProfile() throws {
        let vector = Self.vectors[0]
        let token = try Self.verifier(vector, profile: .standard).verify(try Self.token(1), now: vector.issuedAt + 60)
        #expect(token.claims["email_verified"] == "true")
        #expect(token.emailVerified == nil)
        #expect(token.isPrivateEmail == nil)
    }
}
