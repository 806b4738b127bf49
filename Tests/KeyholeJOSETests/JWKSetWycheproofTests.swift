import Foundation
import KeyholeJOSE
import KeyholeProtocol
import NIOCore
import Testing

/// Wycheproof's JSON Web Key file: whole key sets (duplicate kids, mixed sets, weak RSA keys, wrong uses,
/// points off the curve) and tokens checked against them through `JWKSet` and `JWSVerifier`.
@Suite("JWK sets: Wycheproof")
struct JWKSetWycheproofTests {
    /// Valid cases keyholed refuses by policy: HMAC (an issuer token is never checked with a shared secret).
    static func refusedByPolicy(_ group: JSONValue) -> Bool {
        let keys = (group["public"] ?? group["private"]).flatMap { $0["keys"]?.arrayValue ?? [$0] } ?? []
        return keys.contains { $0["kty"] == "oct" }
    }

    @Test("every key set and token of json_web_key_test.json")
    func keySets() throws {
        let data = try Data(contentsOf: SignatureWycheproofTests.fixtures.appendingPathComponent("wycheproof/json_web_key_test.json"))
        let groups = try JSONValue.parse(ByteBuffer(bytes: data))["testGroups"]!.arrayValue!
        var validAccepted = 0, invalidRejected = 0, refusedByPolicy = 0
        for group in groups {
            let document = group["public"] ?? group["private"]!
            // A single JWK is a set of one.
            let setJSON = document["keys"] != nil ? document : ["keys": [document]]
            let set = try JWKSet(json: Array(setJSON.jsonText.utf8))
            let verifier = JWSVerifier(keys: set, algorithms: Set(JWSAlgorithm.allCases))
            for test in group["tests"]!.arrayValue! {
                let name = "tcId \(test["tcId"]!) \(group["comment"]!.stringValue!): \(test["comment"]!.stringValue!)"
                var accepted = false
                if let jws = try? CompactJWS.parse(test["jws"]!.stringValue!), (try? verifier.verify(jws)) != nil {
                    accepted = true
                }
                if test["result"] == "valid" && Self.refusedByPolicy(group) {
                    refusedByPolicy += 1
                    #expect(!accepted, "\(name): HMAC must be refused")
                } else if test["result"] == "valid" {
                    validAccepted += 1
                    #expect(accepted, "\(name)")
                } else {
                    invalidRejected += 1
                    #expect(!accepted, "\(name)")
                }
            }
        }
        // The file's 26 cases: 1 asymmetric valid (tcId 5), 4 HMAC valid refused by policy, 21 invalid.
        #expect(validAccepted == 1)
        #expect(refusedByPolicy == 4)
        #expect(invalidRejected == 21)
        print("json_web_key_test.json: \(validAccepted) valid accepted, \(invalidRejected) invalid rejected, \(refusedByPolicy) HMAC refused by policy")
    }
}
