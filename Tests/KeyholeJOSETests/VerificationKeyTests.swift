import Dispatch
import KeyholeJOSE
import KeyholeProtocol
import Synchronization
import Testing

@Suite("VerificationKey from JWK")
struct VerificationKeyTests {
    /// A real P-256 key (Wycheproof) and a real 2048-bit RSA modulus, as JWK members.
    static let p256: [String: JSONValue] = [
        "kty": "EC", "crv": "P-256",
        "x": "KSexBRK64-3c_kZ4KBKLrSkDJpkZ9whgacjE32xzKDg", "y": "x3h5ZOqsAOWSH7FJimD0YGdms9loUAFVjRqXTnNBUT4",
    ]

    static func with(_ base: [String: JSONValue], _ changes: [String: JSONValue?]) -> [String: JSONValue] {
        var jwk = base
        for (key, value) in changes { jwk[key] = value }
        return jwk
    }

    @Test("use, alg and key_ops limit what a key verifies")
    func constraints() throws {
        #expect(try VerificationKey(jwk: Self.p256).permits(.es256))
        #expect(try VerificationKey(jwk: Self.with(Self.p256, ["use": "sig", "alg": "ES256", "key_ops": ["verify"]])).permits(.es256))
        #expect(try !VerificationKey(jwk: Self.with(Self.p256, ["use": "enc"])).permits(.es256))
        #expect(try !VerificationKey(jwk: Self.with(Self.p256, ["alg": "ES384"])).permits(.es256))
        #expect(try !VerificationKey(jwk: Self.with(Self.p256, ["alg": "HS256"])).permits(.es256))
        #expect(try !VerificationKey(jwk: Self.with(Self.p256, ["key_ops": ["encrypt"]])).permits(.es256))
        // A P-256 key never verifies other algorithms.
        #expect(try !VerificationKey(jwk: Self.p256).permits(.es384))
        #expect(try !VerificationKey(jwk: Self.p256).permits(.rs256))
    }

    @Test("unusable keys are refused with key_invalid", arguments: [
        with(p256, ["crv": "P-521"]),
        with(p256, ["kty": "oct"]),
        with(p256, ["kty": nil]),
        with(p256, ["x": "AAAA"]),
        with(p256, ["y": "x3h5ZOqsAOWSH7FJimD0YGdms9loUAFVjRqXTnNBUT8"]),  // not on the curve
        with(p256, ["x": .int(5)]),
        with(p256, ["key_ops": "verify"]),
        ["kty": "OKP", "crv": "X25519", "x": "fU0Of2FTpptiQrUiq77mhf2kQg-INLEIw72uNp71Sfo"],
        ["kty": "OKP", "crv": "Ed25519", "x": "fU0Of2FTpptiQrUiq77mhf2kQg"],
        ["kty": "RSA", "n": "AQAB", "e": "AQAB"],
    ])
    func refused(jwk: [String: JSONValue]) {
        #expect(throws: JOSEError.keyInvalid("")) { try VerificationKey(jwk: jwk) }
    }

    @Test("RSA keys below 2048 bits, with exponent 1 or an even exponent are refused")
    func rsaLimits() {
        let modulus2048 = String(repeating: "w", count: 342) + "8"  // 2048 bits, top bit set, odd
        let modulus1024 = String(repeating: "w", count: 171)
        #expect(throws: JOSEError.keyInvalid("")) { try VerificationKey(jwk: ["kty": "RSA", "n": .string(modulus1024), "e": "AQAB"]) }
        #expect(throws: JOSEError.keyInvalid("")) { try VerificationKey(jwk: ["kty": "RSA", "n": .string(modulus2048), "e": "AQ"]) }
        #expect(throws: JOSEError.keyInvalid("")) { try VerificationKey(jwk: ["kty": "RSA", "n": .string(modulus2048), "e": "AQA"]) }
    }

    @Test("a key set skips unusable keys and keeps the rest")
    func keySet() throws {
        let document = #"{"keys":[{"kty":"oct","k":"AAAA","kid":"sym"},{"kty":"EC","crv":"P-256","kid":"ok","x":"KSexBRK64-3c_kZ4KBKLrSkDJpkZ9whgacjE32xzKDg","y":"x3h5ZOqsAOWSH7FJimD0YGdms9loUAFVjRqXTnNBUT4"},7]}"#
        let set = try JWKSet(json: Array(document.utf8))
        #expect(set.keys.map(\.kid) == ["ok"])
        #expect(set.skipped.count == 2)
        #expect(throws: JOSEError.keyInvalid("")) { try JWKSet(json: Array(#"{"kees":[]}"#.utf8)) }
        #expect(throws: JOSEError.keyInvalid("")) { try JWKSet(json: Array("nope".utf8)) }
    }

    @Test("SHA-256 matches the FIPS 180-2 test vector")
    func sha256() {
        #expect(SHA256.hexDigest(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
    }

    @Test("a key set of more than 100 entries is refused whole; one of 100 is read, each distinct JWK made once")
    func keySetBound() throws {
        let key = #"{"kty":"EC","crv":"P-256","kid":"k","x":"KSexBRK64-3c_kZ4KBKLrSkDJpkZ9whgacjE32xzKDg","y":"x3h5ZOqsAOWSH7FJimD0YGdms9loUAFVjRqXTnNBUT4"}"#
        func document(_ entries: [String]) -> [UInt8] { Array((#"{"keys":["# + entries.joined(separator: ",") + "]}").utf8) }
        do {
            _ = try JWKSet(json: document(Array(repeating: key, count: 101)))
            Issue.record("a set of 101 entries was read")
        } catch {
            #expect(error.code == .keyInvalid && error.message.contains("101 entries"), "\(error)")
        }
        // Entries that are not keys count too: they cost a parse and a refusal each.
        #expect(throws: JOSEError.keyInvalid("")) { try JWKSet(json: document(Array(repeating: "7", count: 101))) }
        #expect(throws: JOSEError.keyInvalid("")) { try JWKSet(json: document(Array(repeating: #"{"kty":"oct"}"#, count: 101))) }
        let set = try JWKSet(json: document(Array(repeating: key, count: JWKSet.maximumKeys)))
        #expect(set.keys.count == JWKSet.maximumKeys)
        // The same JWK twice is the same fingerprint, and the same key object, made once.
        #expect(set.built == 1)
        #expect(set.keys[0].fingerprint == set.keys[1].fingerprint && set.keys[0] === set.keys[99])
        let other = try JWKSet(json: Array(#"{"keys":[\#(key.replacingOccurrences(of: "\"k\"", with: "\"k2\""))]}"#.utf8))
        #expect(other.keys[0].fingerprint != set.keys[0].fingerprint)
        #expect(other.reusingKeys(of: set).keys[0] !== set.keys[0])
        #expect(JWKSet(keys: [set.keys[1]]).reusingKeys(of: set).keys[0] === set.keys[0])
    }

    /// Checks copy a verification context the key prepared once; threads share the key, never a copy.
    @Test("one key verifies on several threads at once, each check with its own context")
    func concurrentChecks() throws {
        let signer = SigningKey()
        let key = try VerificationKey(jwk: signer.publicJWK())
        let messages = (0..<16).map { Array("message \($0)".utf8) }
        let signatures = try messages.map { message throws(JOSEError) in try signer.sign(message) }
        let wrong = Mutex(0)
        DispatchQueue.concurrentPerform(iterations: 4) { thread in
            var mistakes = 0
            for round in 0..<50 {
                for (index, message) in messages.enumerated() {
                    // Every other check pairs a message with another message's signature: it must fail.
                    let forged = (round + thread + index) % 2 == 1
                    let signature = signatures[forged ? (index + 1) % messages.count : index]
                    if key.verify(signature: signature, message: message, algorithm: .es256) == forged { mistakes += 1 }
                }
            }
            wrong.withLock { $0 += mistakes }
        }
        #expect(wrong.withLock { $0 } == 0)
        // The key still checks after all that: no context was used up or left in a failed state.
        #expect(key.verify(signature: signatures[0], message: messages[0], algorithm: .es256))
        #expect(!key.verify(signature: signatures[1], message: messages[0], algorithm: .es256))
    }
}
