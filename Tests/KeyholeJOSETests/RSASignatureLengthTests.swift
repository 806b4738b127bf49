import Foundation
import KeyholeJOSE
import KeyholeProtocol
import NIOCore
import Testing

/// An RSA signature is exactly as long as the modulus (RFC 8017 8.1.2, 8.2.2; issue 26, finding 6).
///
/// Fixtures/keys/rsa2048-leading-zero.json holds a PS256 and an RS256 token, made with the openssl
/// command line, whose 256-byte signatures begin with a zero byte. OpenSSL's PSS check strips leading
/// zeros before comparing, so the 255 bytes after it also passed: one signature, two token strings.
@Suite("RSA signature length")
struct RSASignatureLengthTests {
    static let fixture: [String: JSONValue] = {
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("Fixtures/keys/rsa2048-leading-zero.json")
        guard case .object(let object) = try! JSONValue.parse(ByteBuffer(bytes: Array(try! Data(contentsOf: url)))) else {
            fatalError("\(url.path) is not a JSON object")
        }
        return object
    }()

    static func key() throws -> VerificationKey {
        guard case .object(let jwk)? = fixture["jwk"] else { throw JOSEError.keyInvalid("fixture has no jwk") }
        return try VerificationKey(jwk: jwk)
    }

    /// The token's parts, and the same token with its signature's leading zero byte dropped.
    static func tokens(_ algorithm: JWSAlgorithm) throws -> (full: CompactJWS, stripped: CompactJWS, strippedText: String) {
        guard case .string(let token)? = fixture[algorithm.rawValue] else { throw JOSEError.malformed("no \(algorithm) token") }
        let full = try CompactJWS.parse(token)
        let signingInput = String(decoding: full.signingInput, as: UTF8.self)
        let strippedText = signingInput + "." + Base64URL.encode(full.signature.dropFirst())
        return (full, try CompactJWS.parse(strippedText), strippedText)
    }

    @Test("a signature without its leading zero byte is refused; the full one verifies", arguments: [JWSAlgorithm.ps256, .rs256])
    func strippedSignature(algorithm: JWSAlgorithm) throws {
        let key = try Self.key()
        let (full, stripped, strippedText) = try Self.tokens(algorithm)
        #expect(full.signature.count == 256 && full.signature[0] == 0)
        #expect(stripped.signature == Array(full.signature.dropFirst()))
        #expect(key.verify(signature: full.signature, message: full.signingInput, algorithm: algorithm))
        #expect(!key.verify(signature: stripped.signature, message: stripped.signingInput, algorithm: algorithm))
        // Through the verifier as a token arrives: the other spelling is a bad signature, not a second token.
        let verifier = JWSVerifier(keys: JWKSet(keys: [key]), algorithms: [algorithm])
        #expect(try verifier.verify(full) === key)
        #expect(throws: JOSEError(.tokenSignatureInvalid, "")) { try verifier.verify(try CompactJWS.parse(strippedText)) }
    }

    @Test("longer signatures, zero-padded or not, are refused for every RSA algorithm", arguments: [JWSAlgorithm.ps256, .rs256])
    func paddedSignature(algorithm: JWSAlgorithm) throws {
        let key = try Self.key()
        let (full, _, _) = try Self.tokens(algorithm)
        #expect(!key.verify(signature: [0] + full.signature, message: full.signingInput, algorithm: algorithm))
        #expect(!key.verify(signature: full.signature + [0], message: full.signingInput, algorithm: algorithm))
        // And the other RSA algorithms refuse any length but 256 before libcrypto sees it.
        for other in [JWSAlgorithm.rs384, .rs512, .ps384, .ps512] {
            #expect(!key.verify(signature: Array(full.signature.dropFirst()), message: full.signingInput, algorithm: other))
        }
    }
}
