#if KEYHOLE_FUZZ
@testable import KeyholeJOSE
import KeyholeProtocol

/// The token and key-set decoders: what an identity token and an issuer's key set can do to keyholed.
enum JOSETargets {
    /// Input: a token as `token.verify` receives it. A token that parses is verified against the fuzz
    /// key set (one key of each type keyholed verifies with, so a token naming one of its `kid`s gets
    /// as far as the signature check in libcrypto), and its payload goes through the claim checks of
    /// both profiles, which in keyholed only a signed payload reaches.
    static func jws(_ input: [UInt8]) {
        let token = String(decoding: input, as: UTF8.self)
        guard let jws = try? CompactJWS.parse(token) else { return }
        fuzzCheck(jws.signingInput.count < token.utf8.count, "the signing input is not a prefix of the token")
        _ = try? verifier.verify(jws)
        for policy in policies {
            _ = try? ClaimsValidator.validate(payload: jws.payload, policy: policy, now: 1_800_000_000, audience: nil, nonce: nil)
            _ = try? ClaimsValidator.validate(
                payload: jws.payload, policy: policy, now: 1_800_000_000, audience: "fuzz-app", nonce: "n-0S6_WzA2Mj")
        }
    }

    /// Input: a key set document as fetched from a `jwks_uri`. A set that loads must refuse junk
    /// signatures with each key, load the same keys again, and keep its key objects across a refetch.
    static func jwk(_ input: [UInt8]) {
        guard let set = try? JWKSet(json: input) else { return }
        fuzzCheck(set.keys.count <= JWKSet.maximumKeys, "\(set.keys.count) keys loaded")
        for key in set.keys {
            _ = key.description
            for algorithm in JWSAlgorithm.allCases where key.permits(algorithm) {
                // A signature of the wrong size for every algorithm: refused, never a crash in libcrypto.
                fuzzCheck(!key.verify(signature: [1, 2, 3], message: input, algorithm: algorithm), "a junk signature verified")
            }
        }
        guard let again = try? JWKSet(json: input) else {
            fuzzCheck(false, "a key set loaded once and not twice")
            return
        }
        // Loading is deterministic but for one thing: an RSA modulus that is not the product of two
        // large primes passes OpenSSL 3.0's public check unless one of the check's random Miller-Rabin
        // bases happens to share a factor with it, so such a key can load once and not twice (found
        // by this target: a mutated modulus with the factor 983, refused only now and then).
        func steady(_ set: JWKSet) -> [[UInt8]] {
            set.keys.filter { if case .rsa = $0.kind { false } else { true } }.map(\.fingerprint)
        }
        fuzzCheck(steady(again) == steady(set), "a key set loaded differently twice")
        // A refetch of the same document keeps every key object (the verified-token cache relies on it).
        let reused = again.reusingKeys(of: set)
        fuzzCheck(
            reused.keys.count == again.keys.count
                && reused.keys.allSatisfy { key in set.contains(key) || !set.keys.contains { $0.fingerprint == key.fingerprint } },
            "reusingKeys did not keep a key it had")
    }

    /// The public halves of Tests/Fuzz/keys (RSA 2048, P-256, P-384, Ed25519), made by make-seeds.py.
    static let keySetJSON = #"""
        {"keys": [
            {"kty":"RSA","kid":"rsa","use":"sig","n":"kpazT_ioDaOyalnu5ng0SoSl8ZM2QlW6VNyHIXp8HmBSH3ngPjF5iyzrKQn2mpdUOgMqNh5jKVCu0gfj22L_qwbsrXBRI2t5yZSixEcjnO49wzQSp0u0syoAfbfeKheWWDN4zOolpdABgPU6ZXwDB77oSiCmE7LKoXONkjZcj5VUM4kde0ADU4sRM7OEooHXdN0axGtUPP-eqlfOzVFf_D3r0dXyAQjOj7cFB_olbBBUjZMhOHvNlgedTThR1UbWhfy0yapu42fOg16f-l4qlykTZ9FOa977U-mp0rgQJ-fE9_AzH8kYaxeLOfetGtszYfUVKvCZ48FSYO1n0kx-kw","e":"AQAB"},
            {"kty":"EC","kid":"p256","crv":"P-256","x":"87h6Bp5iyvpEelI-HYMJ6KblIxvS1efLZ62YdwYnPXk","y":"B_Sg_85k2YqQvQWQ3kF1s8ucmeXgAnd9QZgVM4xBwOI"},
            {"kty":"EC","kid":"p384","crv":"P-384","x":"SwOIWb0C9N8iNvUOjQEfnSe3ATHeCMFgH60EvMUnwqCCqtrWdEwhQPmwOyyZiHWC","y":"FPfRlfwBgkuzzN1G6XLby6Nka_yW1WPD8EfS3nvSAmHhfQj_giPAsrJxu0HsHNqM"},
            {"kty":"OKP","kid":"ed25519","crv":"Ed25519","x":"D6mrjDFne4tGHTgShtOoWmdH38g94EGiw8Z_Zq5DV4E"}
        ]}
        """#

    static let verifier: JWSVerifier = {
        do throws(JOSEError) {
            return JWSVerifier(keys: try JWKSet(json: Array(keySetJSON.utf8)), algorithms: Set(JWSAlgorithm.allCases))
        } catch {
            fatalError("the fuzz key set does not load: \(error)")
        }
    }()

    static let policies = [
        ClaimsPolicy(issuer: "https://fuzz.example", audiences: ["fuzz-app"]),
        ClaimsPolicy(issuer: "https://appleid.apple.com", audiences: ["fuzz-app"], leeway: 0, profile: .apple),
    ]
}
#endif
