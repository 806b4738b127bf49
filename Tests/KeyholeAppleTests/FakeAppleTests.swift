import Foundation
import KeyholeApple
import KeyholeJOSE
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Testing

/// The fake Apple the end-to-end tests rely on is as strict as Apple: its check of client secrets
/// (its own decoding and openssl's ES256 verification, FakeApple+ClientSecret) refuses each way a
/// secret can be wrong, and its identity tokens are RS256 under a published kid, as Apple's are.
@Suite("The fake Apple", .ownThreads)
struct FakeAppleTests {
    static let client = "com.example.web"

    /// `claims` under `header`, signed ES256 by `key` (the raw r||s of JWS), encoded here.
    static func secret(_ claims: [String: JSONValue], header: [String: JSONValue], key: SigningKey) throws -> String {
        let input = OpenSSLTool.base64URL(Array(JSONValue.object(header).jsonText.utf8)) + "."
            + OpenSSLTool.base64URL(Array(JSONValue.object(claims).jsonText.utf8))
        return input + "." + OpenSSLTool.base64URL(try key.sign(Array(input.utf8)))
    }

    static func claims(_ apple: FakeApple, now: Int64, changing changes: [String: JSONValue] = [:]) -> [String: JSONValue] {
        var claims: [String: JSONValue] = [
            "iss": .string(apple.teamID), "sub": .string(client), "aud": "https://appleid.apple.com",
            "iat": .int(now - 60), "exp": .int(now + 3600),
        ]
        claims.merge(changes) { $1 }
        return claims
    }

    @Test("a client secret keyholed's ClientSecrets makes is taken; one wrong in any way is refused, with the reason")
    func clientSecrets() async throws {
        let apple = try await FakeApple()
        let now = Int64(Date().timeIntervalSince1970)
        let made = try ClientSecrets(configuration: .init(teamID: apple.teamID, keyID: apple.keyID), key: apple.teamKey).secret(for: Self.client)
        #expect(apple.checkClientSecret(made, clientID: Self.client) == nil)
        #expect(apple.checkClientSecret(made, clientID: "com.example.app")?.contains("sub com.example.web is not the client_id") == true)

        let header: [String: JSONValue] = ["alg": "ES256", "kid": .string(apple.keyID)]
        let good = try Self.secret(Self.claims(apple, now: now), header: header, key: apple.teamKey)
        #expect(apple.checkClientSecret(good, clientID: Self.client) == nil)
        // The same signature over other claims, or another key's signature over these.
        let parts = good.split(separator: ".")
        let otherPayload = OpenSSLTool.base64URL(Array(JSONValue.object(Self.claims(apple, now: now, changing: ["sub": "com.evil"])).jsonText.utf8))
        let cases: [(String, String)] = [
            ("\(parts[0]).\(otherPayload).\(parts[2])", "signature does not verify with the team's key"),
            (try Self.secret(Self.claims(apple, now: now), header: header, key: SigningKey()), "signature does not verify with the team's key"),
            ("\(parts[0]).\(parts[1]).\(OpenSSLTool.base64URL(Array(repeating: 7, count: 63)))", "is 63 bytes, not the 64 of r and s"),
            ("\(parts[0]).\(parts[1])", "not a compact JWS"),
            ("\(parts[0]).\(parts[1]).\(parts[2])=", "not a compact JWS"),
            (try Self.secret(Self.claims(apple, now: now), header: ["alg": "ES384", "kid": .string(apple.keyID)], key: apple.teamKey), "alg is ES384, not ES256"),
            (try Self.secret(Self.claims(apple, now: now), header: ["alg": "ES256", "kid": "OTHERKEY12"], key: apple.teamKey), "kid is OTHERKEY12"),
            (try Self.secret(Self.claims(apple, now: now), header: ["alg": "ES256"], key: apple.teamKey), "header is not JSON with alg and kid"),
            (try Self.secret(Self.claims(apple, now: now, changing: ["iss": "OTHERTEAM1"]), header: header, key: apple.teamKey), "iss OTHERTEAM1 is not the team id"),
            (try Self.secret(Self.claims(apple, now: now, changing: ["aud": "https://appleid.apple.com/"]), header: header, key: apple.teamKey), "aud https://appleid.apple.com/ is not"),
            (try Self.secret(Self.claims(apple, now: now, changing: ["aud": ["https://appleid.apple.com"]]), header: header, key: apple.teamKey), "client secret claims"),
            (try Self.secret(Self.claims(apple, now: now, changing: ["iat": .double(Double(now) - 0.5)]), header: header, key: apple.teamKey), "client secret claims"),
            (try Self.secret(Self.claims(apple, now: now, changing: ["exp": "soon"]), header: header, key: apple.teamKey), "client secret claims"),
            (try Self.secret(Self.claims(apple, now: now, changing: ["iat": .int(now + 600)]), header: header, key: apple.teamKey), "is in the future"),
            (try Self.secret(Self.claims(apple, now: now, changing: ["exp": .int(now - 1)]), header: header, key: apple.teamKey), "expired"),
            (try Self.secret(Self.claims(apple, now: now, changing: ["exp": .int(now - 60 + 15_777_001)]), header: header, key: apple.teamKey), "longer than six months"),
        ]
        for (secret, reason) in cases {
            let refusal = apple.checkClientSecret(secret, clientID: Self.client)
            #expect(refusal?.contains(reason) == true, "\(reason): \(refusal ?? "taken")")
        }
        try await apple.close()
    }

    @Test("an ECDSA signature's r||s becomes DER: minimal integers, a zero byte before a high bit")
    func derSignatures() {
        let high = [UInt8](repeating: 0x80, count: 32)
        let leadingZeros = [0, 0] + [UInt8](repeating: 0x01, count: 30)
        #expect(OpenSSLTool.derSignature(raw: high + leadingZeros) == [0x30, 67, 0x02, 33, 0x00] + high + [0x02, 30] + [UInt8](repeating: 0x01, count: 30))
        #expect(OpenSSLTool.derSignature(raw: [UInt8](repeating: 0, count: 64)) == [0x30, 6, 0x02, 1, 0x00, 0x02, 1, 0x00])
        #expect(OpenSSLTool.derSignature(raw: [UInt8](repeating: 1, count: 63)) == nil)
    }

    @Test("identity tokens are RS256 with the kid of the key set's only key, an RSA key with alg RS256; forged ones are RS256 under the same kid and do not verify")
    func identityTokens() async throws {
        let apple = try await FakeApple()
        let token = apple.identityToken(sub: "001.a", audience: Self.client)
        let jws = try CompactJWS.parse(token)
        #expect(jws.algorithm == "RS256")
        #expect(jws.keyID == apple.identityKeyID)
        let jwk = apple.identityKey.publicJWK(kid: apple.identityKeyID)
        #expect(jwk["kty"] == "RSA" && jwk["alg"] == "RS256" && jwk["use"] == "sig" && jwk["e"] == "AQAB")
        #expect(apple.identityKey.modulus.count == 256 && apple.identityKey.modulus[0] & 0x80 != 0)
        let keys = JWKSet(keys: [try VerificationKey(jwk: jwk)])
        _ = try JWSVerifier(keys: keys, algorithms: [.rs256]).verify(jws)

        let forged = try CompactJWS.parse(apple.notification(type: "account-delete", sub: "001.a", audience: Self.client, forged: true))
        #expect(forged.algorithm == "RS256" && forged.keyID == apple.identityKeyID)
        #expect(throws: JOSEError.self) { try JWSVerifier(keys: keys, algorithms: [.rs256]).verify(forged) }
        try await apple.close()
    }
}
