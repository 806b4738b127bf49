import Foundation
import KeyholeJOSE
import KeyholeProtocol
import NIOCore
import Testing

/// ES256 signing with P-256 private keys from PEM files (Apple's `.p8`), checked with the verifier.
@Suite("Signing keys")
struct SigningKeyTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .appendingPathComponent("Fixtures/keys")

    static func fixture(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: fixtures.appendingPathComponent(name)))
    }

    static func verifies(_ signature: [UInt8], _ message: [UInt8], with key: SigningKey) throws -> Bool {
        try VerificationKey(jwk: key.publicJWK()).verify(signature: signature, message: message, algorithm: .es256)
    }

    @Test("a .p8 key signs ES256 signatures that verify under its public key, and only for the message signed")
    func signAndVerify() throws {
        let key = try SigningKey(pem: Self.fixture("p256-pkcs8.p8"))
        let message = Array("header.payload".utf8)
        let first = try key.sign(message)
        let second = try key.sign(message)
        #expect(first.count == 64)
        // ECDSA draws a fresh nonce per signature.
        #expect(first != second)
        #expect(try Self.verifies(first, message, with: key))
        #expect(try Self.verifies(second, message, with: key))
        #expect(try !Self.verifies(first, Array("header.payloae".utf8), with: key))
        var flipped = first
        flipped[10] ^= 0x01
        #expect(try !Self.verifies(flipped, message, with: key))
    }

    @Test("the public JWK carries the point OpenSSL derives from the file")
    func publicPoint() throws {
        let key = try SigningKey(pem: Self.fixture("p256-pkcs8.p8"))
        let hex = String(decoding: try Self.fixture("p256-public-point.hex"), as: UTF8.self)
        let point = stride(from: 0, to: hex.utf8.count, by: 2).map { offset -> UInt8 in
            let start = hex.index(hex.startIndex, offsetBy: offset)
            return UInt8(hex[start..<hex.index(start, offsetBy: 2)], radix: 16)!
        }
        let jwk = key.publicJWK(kid: "K1")
        #expect(jwk["x"] == .string(Base64URL.encode(point[1...32])))
        #expect(jwk["y"] == .string(Base64URL.encode(point[33...64])))
        #expect(jwk["kid"] == .string("K1"))
        #expect(jwk["alg"] == .string("ES256"))
        #expect(jwk["d"] == nil)
    }

    @Test("SEC 1 and PKCS#8 forms of one key are the same key")
    func sec1() throws {
        let pkcs8 = try SigningKey(pem: Self.fixture("p256-pkcs8.p8"))
        let sec1 = try SigningKey(pem: Self.fixture("p256-sec1.pem"))
        #expect(pkcs8.publicJWK() == sec1.publicJWK())
        let message = Array("m".utf8)
        #expect(try Self.verifies(try sec1.sign(message), message, with: pkcs8))
    }

    @Test("a generated key survives its PKCS#8 PEM, and its description shows no key material")
    func generatedRoundTrip() throws {
        let key = SigningKey()
        let pem = key.pkcs8PEM()
        #expect(String(decoding: pem, as: UTF8.self).hasPrefix("-----BEGIN PRIVATE KEY-----"))
        let reloaded = try SigningKey(pem: pem)
        #expect(reloaded.publicJWK() == key.publicJWK())
        #expect(key.description == "EC P-256 private key")
        #expect(SigningKey().publicJWK() != key.publicJWK())
    }

    @Test("anything but an unencrypted P-256 private key is key_invalid", arguments: [
        "p384.pem", "rsa2048.pem", "p256-encrypted.p8", "p256-public.pem", "p256-public-point.hex", "README.md",
    ])
    func refused(name: String) throws {
        let bytes = try Self.fixture(name)
        let error = #expect(throws: JOSEError.self) { try SigningKey(pem: bytes) }
        #expect(error?.code == .keyInvalid)
        #expect(error.map { !$0.message.contains("BEGIN") } ?? false)
    }

    @Test("empty and truncated files are key_invalid")
    func truncated() throws {
        #expect(throws: JOSEError.self) { try SigningKey(pem: []) }
        let pem = try Self.fixture("p256-pkcs8.p8")
        #expect(throws: JOSEError.self) { try SigningKey(pem: Array(pem.prefix(pem.count / 2))) }
    }

    @Test("a signed JWT parses and verifies against a key set holding the public key")
    func signedJWT() throws {
        let key = SigningKey()
        let claims: [String: JSONValue] = ["iss": .string("TEAM123456"), "iat": .int(1_800_000_000), "sub": .string("com.example.web")]
        let token = try key.signJWT(claims: claims, kid: "ABC123DEFG", type: "JWT")
        let jws = try CompactJWS.parse(token)
        #expect(jws.algorithm == "ES256")
        #expect(jws.keyID == "ABC123DEFG")
        #expect(jws.header["typ"] == .string("JWT"))
        #expect(try JSONValue.parse(ByteBuffer(bytes: jws.payload)) == .object(claims))
        let verifier = JWSVerifier(keys: JWKSet(keys: [try VerificationKey(jwk: key.publicJWK(kid: "ABC123DEFG"))]), algorithms: [.es256])
        _ = try verifier.verify(jws)
        let other = JWSVerifier(keys: JWKSet(keys: [try VerificationKey(jwk: SigningKey().publicJWK(kid: "ABC123DEFG"))]), algorithms: [.es256])
        #expect(throws: JOSEError.self) { try other.verify(jws) }
    }
}
