import Foundation
import KeyholeJOSE
import KeyholeProtocol
import NIOCore
import Testing

/// Wycheproof's json_web_signature_test.json through `CompactJWS.parse` and `JWSVerifier`, and the
/// verifier's own rules (algorithm allow-list, key selection) on the same keys and tokens.
@Suite("JWS: Wycheproof and key selection")
struct JWSWycheproofTests {
    static let fixtures = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Fixtures")

    struct Case: Sendable {
        var tcId: Int
        var comment: String
        var jws: String
        var valid: Bool
        /// The group's key: its `public` JWK, else its `private` one (HMAC groups have only that).
        var jwk: [String: JSONValue]
    }

    static let cases: [Case] = {
        let data = try! Data(contentsOf: fixtures.appendingPathComponent("wycheproof/json_web_signature_test.json"))
        let document = try! JSONValue.parse(ByteBuffer(bytes: data))
        var cases: [Case] = []
        for group in document["testGroups"]!.arrayValue! {
            let jwk = (group["public"] ?? group["private"])!.objectValue!
            for test in group["tests"]!.arrayValue! {
                cases.append(
                    Case(
                        tcId: Int(test["tcId"]!.intValue!), comment: test["comment"]!.stringValue!,
                        jws: test["jws"]!.stringValue!, valid: test["result"] == "valid", jwk: jwk))
            }
        }
        return cases
    }()

    static func testCase(_ tcId: Int) -> Case { cases.first { $0.tcId == tcId }! }
    static func key(_ tcId: Int, _ changes: [String: JSONValue?] = [:]) throws -> VerificationKey {
        var jwk = testCase(tcId).jwk
        for (name, value) in changes { jwk[name] = value }
        return try VerificationKey(jwk: jwk)
    }
    static let all = Set(JWSAlgorithm.allCases)

    /// What the whole pipeline makes of one case: "accepted", or the code it was refused with
    /// ("key_invalid" when the group's key itself is refused, so no token of the group can verify).
    static func outcome(_ test: Case) -> String {
        let key: VerificationKey
        do { key = try VerificationKey(jwk: test.jwk) } catch { return error.code.rawValue }
        do {
            let jws = try CompactJWS.parse(test.jws)
            _ = try JWSVerifier(keys: JWKSet(keys: [key]), algorithms: all).verify(jws)
            return "accepted"
        } catch {
            return error.code.rawValue
        }
    }

    /// The `valid` cases keyholed refuses on purpose, and why. 14 of the file's 46 valid cases:
    /// - 10 HS256 (tcId 1, 348, 352, 357-359, 372, 373, 376, 377): issuer tokens are never verified with
    ///   a shared secret, and an `oct` JWK is not a verification key;
    /// - 2 ES512 with a P-521 key (347, 351): not an algorithm keyholed implements;
    /// - 2 PS384 tokens whose key says `"alg": "PS256"` (346, 350): issue 3 requires a key's `alg` to equal
    ///   the token's, the very rule that makes tcId 332 (key PS512, token RS256) invalid.
    static let refusedValid: [Int: String] = [
        1: "key_invalid", 348: "key_invalid", 352: "key_invalid", 357: "key_invalid", 358: "key_invalid",
        359: "key_invalid", 372: "key_invalid", 373: "key_invalid", 376: "key_invalid", 377: "key_invalid",
        347: "key_invalid", 351: "key_invalid",
        346: "token_key_unknown", 350: "token_key_unknown",
    ]

    @Test("every valid case is accepted unless refused by policy; every invalid case is rejected")
    func wholeFile() throws {
        #expect(Self.cases.count == 401)
        var tally: [String: Int] = [:]
        for test in Self.cases {
            let outcome = Self.outcome(test)
            tally[outcome, default: 0] += 1
            if test.valid {
                #expect(outcome == (Self.refusedValid[test.tcId] ?? "accepted"), "tcId \(test.tcId) \(test.comment)")
            } else {
                #expect(outcome != "accepted", "tcId \(test.tcId) \(test.comment) was accepted")
            }
        }
        // 32 valid cases accepted; 369 cases rejected: 14 valid ones by policy, all 355 invalid ones.
        #expect(Self.cases.filter(\.valid).count == 46)
        #expect(
            tally == [
                "accepted": 32,
                "key_invalid": 42,  // every case of the HS256 and P-521 groups: their keys are refused
                "token_malformed": 20,  // segments, base64url, JSON serialisation, `alg: none` without signature
                "token_alg_not_allowed": 1,  // tcId 31, HS256 against the EC group's key
                "token_key_unknown": 13,  // kid changed, key's alg/use/key_ops forbid the token's alg
                "token_signature_invalid": 293,
            ], "\(tally)")
    }

    @Test("a group whose key is refused holds no valid case of an algorithm keyholed implements")
    func refusedKeysHoldNoSupportedValidCase() throws {
        for test in Self.cases where (try? VerificationKey(jwk: test.jwk)) == nil {
            // The tokens are refused on their own too, with no key involved.
            var refusal = "accepted"
            do {
                _ = try JWSVerifier(keys: JWKSet(keys: []), algorithms: Self.all).verify(try CompactJWS.parse(test.jws))
            } catch {
                refusal = error.code.rawValue
            }
            #expect(refusal != "accepted", "tcId \(test.tcId)")
            guard test.valid else { continue }
            // The key is for an algorithm keyholed refuses (HS256, ES521), and so is the token when
            // its header can be read at all (tcId 372 and 373 carry a '?' that strict base64url refuses).
            #expect(JWSAlgorithm(rawValue: test.jwk["alg"]?.stringValue ?? "") == nil, "tcId \(test.tcId)")
            if let algorithm = try? CompactJWS.parse(test.jws).algorithm {
                #expect(JWSAlgorithm(rawValue: algorithm) == nil, "tcId \(test.tcId) is a valid \(algorithm) case")
                #expect(refusal == "token_alg_not_allowed", "tcId \(test.tcId)")
            } else {
                #expect(refusal == "token_malformed", "tcId \(test.tcId)")
            }
        }
    }

    @Test(
        "tcId 332, 353, 355: mathematically valid RS256 signatures refused because of the key's alg, use, key_ops",
        arguments: [332, 353, 355])
    func keyConstraints(tcId: Int) throws {
        let jws = try CompactJWS.parse(Self.testCase(tcId).jws)
        let constrained = JWSVerifier(keys: JWKSet(keys: [try Self.key(tcId)]), algorithms: Self.all)
        #expect(throws: JOSEError(.tokenKeyUnknown, "")) { try constrained.verify(jws) }
        // Without alg, use and key_ops the same key verifies the same token: only the constraint refused it.
        let free = try Self.key(tcId, ["alg": nil, "use": nil, "key_ops": nil])
        #expect(try JWSVerifier(keys: JWKSet(keys: [free]), algorithms: Self.all).verify(jws) === free)
    }

    // MARK: - The verifier's rules

    /// RFC 7515 appendix A.2: an RS256 token without `kid`, and its key.
    static let rfc7515Token =
        "eyJhbGciOiJSUzI1NiJ9.eyJpc3MiOiJqb2UiLA0KICJleHAiOjEzMDA4MTkzODAsDQogImh0dHA6Ly9leGFtcGxlLmNvbS9pc19yb290Ijp0cnVlfQ.cC4hiUPoj9Eetdgtv3hF80EGrhuB__dzERat0XF9g2VtQgr9PJbu3XOiZj5RZmh7AAuHIm4Bh-0Qc_lF5YKt_O8W2Fp5jujGbds9uJdbF9CUAr7t1dnZcAcQjbKBYNX4BAynRFdiuB--f_nZLgrnbyTyWzO75vRK5h6xBArLIARNPvkSjtQBMHlb1L07Qe7K0GarZRmB_eSN9383LcOLn6_dO--xi12jzDwusC-eOkHWEsqtFZESc6BfI7noOPqvhJ1phCnvWh6IeYI2w9QOYEUipUTI8np6LbgGY9Fs98rqVt5AXLIhWkWywlVmtVrBp0igcN_IoypGlUPQGe77Rw"
    static let rfc7515Key: [String: JSONValue] = [
        "kty": "RSA", "e": "AQAB",
        "n":
            "ofgWCuLjybRlzo0tZWJjNiuSfb4p4fAkd_wWJcyQoTbji9k0l8W26mPddxHmfHQp-Vaw-4qPCJrcS2mJPMEzP1Pt0Bm4d4QlL-yRT-SFd2lZS-pCgNMsD1W_YpRPEwOWvG6b32690r2jZ47soMZo9wGzjb_7OMg0LOL-bSf63kpaSHSXndS5z5rexMdbBYUsLA9e-KXBdQOS-UTo7WTBEMa2R2CapHg665xsmtdVMTBQY4uDZlxvb3qCo5ZwKh9kG4LT6_I5IhlJH7aGhyxXFvUK-DWNmoudF8NAco9_h9iaGNj8q2ethFkMLs91kzk2PAcDTW9gb54h4FRWyuXpoQ",
    ]

    static func verify(_ token: String, keys: [VerificationKey], algorithms: Set<JWSAlgorithm> = all) throws(JOSEError)
        -> VerificationKey
    {
        try JWSVerifier(keys: JWKSet(keys: keys), algorithms: algorithms).verify(try CompactJWS.parse(token))
    }

    @Test("alg must be one keyholed implements and on the issuer's allow-list")
    func algorithmAllowList() throws {
        let rsa = try Self.key(33)
        #expect(try Self.verify(Self.testCase(33).jws, keys: [rsa], algorithms: [.rs256]) === rsa)
        #expect(throws: JOSEError(.tokenAlgNotAllowed, "")) {
            try Self.verify(Self.testCase(33).jws, keys: [rsa], algorithms: [.ps256, .es256])
        }
        // HS256 with the EC key's kid and ES512: refused whatever the allow-list and keys.
        for tcId in [31, 347] {
            #expect(throws: JOSEError(.tokenAlgNotAllowed, ""), "tcId \(tcId)") {
                try Self.verify(Self.testCase(tcId).jws, keys: [rsa, try Self.key(18)])
            }
        }
        // Wycheproof's `alg: none` tokens have no signature, so parsing already refuses them; with a
        // signature segment, `none` in any spelling is still refused.
        for tcId in 341...344 {
            #expect(throws: JOSEError.malformed(""), "tcId \(tcId)") {
                try Self.verify(Self.testCase(tcId).jws, keys: [rsa])
            }
        }
        for alg in ["none", "NONE", "None", "rs256", "HS256", "ES512", "RSA-OAEP", ""] {
            let header = Base64URL.encode(Array(#"{"alg":"\#(alg)","kid":"kid-rsa-sign"}"#.utf8))
            #expect(throws: JOSEError(.tokenAlgNotAllowed, ""), "alg \(alg)") {
                try Self.verify(header + ".Zm9v.AQID", keys: [rsa])
            }
        }
    }

    @Test("with a kid, the key with that kid that permits the alg is used")
    func keyByKid() throws {
        let rsa = try Self.key(33)
        let ec = try Self.key(18)
        #expect(try Self.verify(Self.testCase(33).jws, keys: [ec, rsa]) === rsa)
        #expect(try Self.verify(Self.testCase(18).jws, keys: [rsa, ec]) === ec)
        // tcId 40 changes the kid: no such key, so it never reaches the signature check.
        #expect(throws: JOSEError(.tokenKeyUnknown, "")) { try Self.verify(Self.testCase(40).jws, keys: [ec, rsa]) }
        // The kid exists but on a key that cannot verify RS256.
        let ecNamedLikeRSA = try Self.key(18, ["kid": "kid-rsa-sign", "alg": nil])
        #expect(throws: JOSEError(.tokenKeyUnknown, "")) {
            try Self.verify(Self.testCase(33).jws, keys: [ecNamedLikeRSA])
        }
    }

    @Test("keys that share a kid are tried, the first four of them")
    func repeatedKid() throws {
        let impostor = try Self.key(259, ["kid": "kid-rsa-sign"])  // another RS256 key, same kid
        let rsa = try Self.key(33)
        #expect(try Self.verify(Self.testCase(33).jws, keys: [impostor, rsa]) === rsa)
        #expect(throws: JOSEError(.tokenSignatureInvalid, "")) {
            try Self.verify(Self.testCase(33).jws, keys: [impostor])
        }
        // A hostile set repeating the kid: a token costs at most four signature checks.
        let flood = Array(repeating: impostor, count: JWSVerifier.maximumCandidates)
        #expect(try Self.verify(Self.testCase(33).jws, keys: Array(flood.dropLast()) + [rsa]) === rsa)
        #expect(throws: JOSEError(.tokenSignatureInvalid, "")) {
            try Self.verify(Self.testCase(33).jws, keys: flood + [rsa])
        }
    }

    @Test("without a kid, the token verifies only when exactly one key permits its alg")
    func keyWithoutKid() throws {
        let a2 = try VerificationKey(jwk: Self.rfc7515Key)
        let ec = try Self.key(18)
        let rsa = try Self.key(33)
        #expect(try CompactJWS.parse(Self.rfc7515Token).keyID == nil)
        #expect(try Self.verify(Self.rfc7515Token, keys: [a2]) === a2)
        #expect(try Self.verify(Self.rfc7515Token, keys: [ec, a2]) === a2)
        // Two RSA keys permit RS256: which one signed would be a guess.
        #expect(throws: JOSEError(.tokenKeyUnknown, "")) { try Self.verify(Self.rfc7515Token, keys: [a2, rsa]) }
        // None permits RS256.
        #expect(throws: JOSEError(.tokenKeyUnknown, "")) { try Self.verify(Self.rfc7515Token, keys: [ec]) }
        let a2ForPS256 = try VerificationKey(jwk: Self.rfc7515Key.merging(["alg": "PS256"]) { $1 })
        #expect(throws: JOSEError(.tokenKeyUnknown, "")) { try Self.verify(Self.rfc7515Token, keys: [a2ForPS256]) }
        // Exactly one key permits RS256 but it is the wrong one: the signature check decides.
        #expect(throws: JOSEError(.tokenSignatureInvalid, "")) { try Self.verify(Self.rfc7515Token, keys: [ec, rsa]) }
    }

    @Test("keys embedded in the header are never used (tcId 32: jwk of the attacker's key)")
    func embeddedKeyIgnored() throws {
        let jws = try CompactJWS.parse(Self.testCase(32).jws)
        #expect(jws.header["jwk"] != nil)
        #expect(throws: JOSEError(.tokenSignatureInvalid, "")) {
            try Self.verify(Self.testCase(32).jws, keys: [try Self.key(32)])
        }
        #expect(throws: JOSEError(.tokenKeyUnknown, "")) { try Self.verify(Self.testCase(32).jws, keys: []) }
    }

    @Test(
        "real RS256, PS256 and ES256 tokens verify, and fail once their payload is altered",
        arguments: [33, 275, 18, 378])
    func alteredPayload(tcId: Int) throws {
        let test = Self.testCase(tcId)
        let key = try Self.key(tcId)
        #expect(try Self.verify(test.jws, keys: [key]) === key)
        let segments = test.jws.split(separator: ".", omittingEmptySubsequences: false)
        var payload = try #require(Base64URL.decode(segments[1]))
        try #require(!payload.isEmpty)
        payload[payload.count - 1] ^= 0x01
        let altered = [String(segments[0]), Base64URL.encode(payload), String(segments[2])].joined(separator: ".")
        #expect(throws: JOSEError(.tokenSignatureInvalid, "")) { try Self.verify(altered, keys: [key]) }
    }
}
