import Foundation

/// The `openssl` command line tool, for fakes that must sign and verify with code that is not the
/// project's own (KeyholeJOSE): a fake that checked keyholed's signatures with keyholed's verifier
/// would pass a bug the two share. Files go to a directory of the caller's.
package enum OpenSSLTool {
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    /// Runs `openssl arguments`; throws with its output when it exits other than 0.
    @discardableResult
    package static func run(_ arguments: [String]) throws -> ChildProcess.Result {
        let result = try ChildProcess.run(["/usr/bin/openssl"] + arguments)
        guard result.status == 0 else {
            throw Failure(description: "openssl \(arguments.joined(separator: " ")): exit \(result.status): \(result.stdout)\(result.stderr)")
        }
        return result
    }

    /// A file name in `directory` no other call uses.
    package static func scratch(_ directory: URL, _ suffix: String) -> URL {
        directory.appendingPathComponent("\(UUID().uuidString).\(suffix)")
    }

    /// base64url without padding (RFC 7515 section 2), written here rather than taken from KeyholeJOSE.
    package static func base64URL(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }

    /// The bytes of base64url text without padding; nil for anything else (padding, other characters).
    package static func bytes(base64URL text: Substring) -> [UInt8]? {
        let alphabet = Set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
        guard text.allSatisfy(alphabet.contains), text.count % 4 != 1 else { return nil }
        var standard = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        standard += String(repeating: "=", count: (4 - standard.count % 4) % 4)
        return Data(base64Encoded: standard).map(Array.init)
    }

    /// An ECDSA signature as JWS carries it (r and s, each `width` bytes, big-endian) in the DER form
    /// openssl reads: SEQUENCE { INTEGER r, INTEGER s }. nil when the length is not 2 × `width`.
    package static func derSignature(raw: [UInt8], width: Int = 32) -> [UInt8]? {
        guard raw.count == 2 * width else { return nil }
        func integer(_ bytes: ArraySlice<UInt8>) -> [UInt8] {
            // Minimal: no leading zeros, then one zero back when the high bit would make it negative.
            var value = Array(bytes.drop { $0 == 0 })
            if value.isEmpty || value[0] & 0x80 != 0 { value.insert(0, at: 0) }
            return [0x02, UInt8(value.count)] + value
        }
        let body = integer(raw[..<width]) + integer(raw[width...])
        // At most 2 × (2 + 33) = 70 bytes for P-256: a one-byte length.
        precondition(body.count < 128)
        return [0x30, UInt8(body.count)] + body
    }
}
