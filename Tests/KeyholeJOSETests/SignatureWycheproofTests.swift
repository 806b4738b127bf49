import Dispatch
import Foundation
@testable import KeyholeJOSE
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Synchronization
import Testing

/// Wycheproof's signature files through `VerificationKey`, the layer every token check ends in.
@Suite("Signatures: Wycheproof")
struct SignatureWycheproofTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")

    static func load(_ path: String) throws -> JSONValue {
        let data = try Data(contentsOf: fixtures.appendingPathComponent(path))
        return try JSONValue.parse(ByteBuffer(bytes: data))
    }

    struct Tally: CustomStringConvertible {
        var validAccepted = 0, validRejected = 0, invalidAccepted = 0, invalidRejected = 0, acceptable = 0
        var description: String {
            "valid \(validAccepted)/\(validAccepted + validRejected) accepted, invalid \(invalidRejected)/\(invalidAccepted + invalidRejected) rejected, \(acceptable) acceptable"
        }
    }

    @Test("every valid signature verifies and every invalid one fails", arguments: [
        ("wycheproof/rsa_signature_2048_sha256_test.json", JWSAlgorithm.rs256),
        ("wycheproof/rsa_pss_2048_sha256_mgf1_32_test.json", .ps256),
        ("wycheproof/ecdsa_secp256r1_sha256_p1363_test.json", .es256),
        ("wycheproof/ed25519_test.json", .edDSA),
    ])
    func file(path: String, algorithm: JWSAlgorithm) throws {
        var tally = Tally()
        var keysRefused = 0
        for group in try Self.load(path)["testGroups"]!.arrayValue! {
            let tests = group["tests"]!.arrayValue!
            guard let jwk = (group["publicKeyJwk"] ?? group["keyJwk"])?.objectValue ?? Self.ecJWK(group["publicKey"]) else {
                Issue.record("group without a usable key in \(path)")
                continue
            }
            let key: VerificationKey
            do {
                key = try VerificationKey(jwk: jwk)
            } catch {
                // A key we refuse must not be one that signs a valid case.
                keysRefused += 1
                #expect(!tests.contains { $0["result"] == "valid" }, "refused a key with valid cases: \(error)")
                continue
            }
            #expect(key.permits(algorithm))
            for test in tests {
                let message = RawConnection.bytes(hex: test["msg"]!.stringValue!)
                let signature = RawConnection.bytes(hex: test["sig"]!.stringValue!)
                let verified = key.verify(signature: signature, message: message, algorithm: algorithm)
                switch test["result"]!.stringValue! {
                case "valid":
                    if verified { tally.validAccepted += 1 } else { tally.validRejected += 1 }
                    #expect(verified, "tcId \(test["tcId"]!) \(test["comment"]!.stringValue!)")
                case "invalid":
                    if verified { tally.invalidAccepted += 1 } else { tally.invalidRejected += 1 }
                    #expect(!verified, "tcId \(test["tcId"]!) \(test["comment"]!.stringValue!)")
                default:
                    tally.acceptable += 1
                }
            }
        }
        #expect(tally.validAccepted > 0 && tally.invalidRejected > 0)
        print("\(path): \(tally); keys refused: \(keysRefused)")
    }

    /// Some ECDSA groups give the key only as hex coordinates: make the JWK (coordinates at full width).
    static func ecJWK(_ key: JSONValue?) -> [String: JSONValue]? {
        guard let key, key["curve"] == "secp256r1", let wx = key["wx"]?.stringValue, let wy = key["wy"]?.stringValue else {
            return nil
        }
        func coordinate(_ hex: String) -> JSONValue {
            let bytes = RawConnection.bytes(hex: hex).drop(while: { $0 == 0 })
            return .string(Base64URL.encode([UInt8](repeating: 0, count: max(0, 32 - bytes.count)) + bytes))
        }
        return ["kty": "EC", "crv": "P-256", "x": coordinate(wx), "y": coordinate(wy)]
    }

    @Test("a signature is never checked with an algorithm the key does not permit")
    func wrongAlgorithm() throws {
        let group = try Self.load("wycheproof/rsa_signature_2048_sha256_test.json")["testGroups"]!.arrayValue![0]
        let key = try VerificationKey(jwk: group["keyJwk"]!.objectValue!)
        let valid = group["tests"]!.arrayValue!.first { $0["result"] == "valid" }!
        let message = RawConnection.bytes(hex: valid["msg"]!.stringValue!)
        let signature = RawConnection.bytes(hex: valid["sig"]!.stringValue!)
        #expect(key.verify(signature: signature, message: message, algorithm: .rs256))
        // The JWK says RS256: the same key and signature under PS256 or RS512 must fail.
        #expect(!key.permits(.ps256))
        #expect(!key.verify(signature: signature, message: message, algorithm: .ps256))
        #expect(!key.verify(signature: signature, message: message, algorithm: .es256))
    }

    /// Every check copies the context the key prepared for its algorithm; RSA-PSS's copy carries its own
    /// scratch buffer. Four threads check one key's valid and invalid cases at once, all as expected.
    @Test("one prepared key checks Wycheproof cases on four threads at once", arguments: [
        ("wycheproof/rsa_signature_2048_sha256_test.json", JWSAlgorithm.rs256),
        ("wycheproof/rsa_pss_2048_sha256_mgf1_32_test.json", .ps256),
        ("wycheproof/ecdsa_secp256r1_sha256_p1363_test.json", .es256),
    ])
    func concurrent(path: String, algorithm: JWSAlgorithm) throws {
        let group = try Self.load(path)["testGroups"]!.arrayValue![0]
        let jwk = try #require((group["publicKeyJwk"] ?? group["keyJwk"])?.objectValue ?? Self.ecJWK(group["publicKey"]))
        let key = try VerificationKey(jwk: jwk)
        #expect(key.preparedAlgorithms.contains(algorithm))
        let cases = group["tests"]!.arrayValue!.compactMap { test -> (message: [UInt8], signature: [UInt8], valid: Bool)? in
            guard let result = test["result"]?.stringValue, result != "acceptable" else { return nil }
            return (RawConnection.bytes(hex: test["msg"]!.stringValue!), RawConnection.bytes(hex: test["sig"]!.stringValue!), result == "valid")
        }
        #expect(cases.contains { $0.valid } && cases.contains { !$0.valid })
        let wrong = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 4) { _ in
            var mistakes = 0
            for _ in 0..<5 {
                for item in cases where key.verify(signature: item.signature, message: item.message, algorithm: algorithm) != item.valid {
                    mistakes += 1
                }
            }
            wrong.withLock { $0 += mistakes }
        }
        #expect(wrong.withLock { $0 } == 0)
    }

    @Test("keys prepare a context for each algorithm they permit, EdDSA excepted")
    func prepared() throws {
        let rsa = try Self.load("wycheproof/rsa_signature_2048_sha256_test.json")["testGroups"]!.arrayValue![0]
        var jwk = rsa["keyJwk"]!.objectValue!
        #expect(try VerificationKey(jwk: jwk).preparedAlgorithms == [.rs256])
        jwk["alg"] = nil
        #expect(try VerificationKey(jwk: jwk).preparedAlgorithms == [.rs256, .rs384, .rs512, .ps256, .ps384, .ps512])
        jwk["use"] = "enc"
        #expect(try VerificationKey(jwk: jwk).preparedAlgorithms.isEmpty)
        let ed = try Self.load("wycheproof/ed25519_test.json")["testGroups"]!.arrayValue![0]
        let edKey = try VerificationKey(jwk: try #require((ed["publicKeyJwk"] ?? ed["keyJwk"])?.objectValue))
        #expect(edKey.permits(.edDSA) && edKey.preparedAlgorithms.isEmpty)
    }
}
