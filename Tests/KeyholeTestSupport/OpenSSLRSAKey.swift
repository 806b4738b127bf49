import Foundation
import KeyholeProtocol

/// An RSA key pair made and used by the openssl tool (the project's SigningKey is P-256 only): what a
/// fake Apple signs identity tokens and notifications with, RS256 as Apple does. Its files live in a
/// directory of its own, removed with it.
package final class OpenSSLRSAKey: Sendable {
    private let directory: URL
    private let privateKeyPath: String
    /// The public modulus and exponent, big-endian, as a JWK gives them.
    package let modulus: [UInt8]
    package let exponent: [UInt8]

    /// A new 2048-bit key (public exponent 65537).
    package init() throws {
        directory = try DaemonProcess.makeDirectory()
        privateKeyPath = directory.appendingPathComponent("rsa.pem").path
        try OpenSSLTool.run(["genpkey", "-quiet", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", privateKeyPath])
        // "Modulus=<hex>"
        let text = try OpenSSLTool.run(["rsa", "-in", privateKeyPath, "-noout", "-modulus"]).stdout
        let hex = Array(text.trimmingCharacters(in: .whitespacesAndNewlines).drop { $0 != "=" }.dropFirst())
        guard hex.count == 512 else { throw OpenSSLTool.Failure(description: "openssl rsa -modulus: \(text)") }
        modulus = stride(from: 0, to: hex.count, by: 2).map { UInt8(String(hex[$0...$0 + 1]), radix: 16)! }
        guard try OpenSSLTool.run(["rsa", "-in", privateKeyPath, "-noout", "-text"]).stdout.contains("publicExponent: 65537 (0x10001)") else {
            throw OpenSSLTool.Failure(description: "openssl genpkey made a key whose exponent is not 65537")
        }
        exponent = [0x01, 0x00, 0x01]
    }

    deinit { try? FileManager.default.removeItem(at: directory) }

    /// The public key as a JWK, as Apple publishes its keys: kty RSA, kid, use sig, alg RS256, n, e.
    package func publicJWK(kid: String) -> [String: JSONValue] {
        [
            "kty": "RSA", "kid": .string(kid), "use": "sig", "alg": "RS256",
            "n": .string(OpenSSLTool.base64URL(modulus)), "e": .string(OpenSSLTool.base64URL(exponent)),
        ]
    }

    /// RSASSA-PKCS1-v1_5 with SHA-256 of `message` (`openssl dgst -sha256 -sign`).
    package func sign(_ message: [UInt8]) throws -> [UInt8] {
        let input = OpenSSLTool.scratch(directory, "in")
        let output = OpenSSLTool.scratch(directory, "sig")
        defer {
            try? FileManager.default.removeItem(at: input)
            try? FileManager.default.removeItem(at: output)
        }
        try Data(message).write(to: input)
        try OpenSSLTool.run(["dgst", "-sha256", "-sign", privateKeyPath, "-out", output.path, input.path])
        return Array(try Data(contentsOf: output))
    }

    /// A compact JWS of `claims`, header {"alg":"RS256","kid":kid}, as Apple's identity tokens are.
    package func signJWT(claims: [String: JSONValue], kid: String) throws -> String {
        let header = OpenSSLTool.base64URL(Array(JSONValue.object(["alg": "RS256", "kid": .string(kid)]).jsonText.utf8))
        let payload = OpenSSLTool.base64URL(Array(JSONValue.object(claims).jsonText.utf8))
        let signature = try sign(Array("\(header).\(payload)".utf8))
        return "\(header).\(payload).\(OpenSSLTool.base64URL(signature))"
    }
}
