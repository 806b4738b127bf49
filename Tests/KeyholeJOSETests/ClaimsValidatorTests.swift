import KeyholeJOSE
import KeyholeProtocol
import Testing

/// One test per claim rule, on hand-made payloads: the signature layer is not involved.
@Suite("Claims validation")
struct ClaimsValidatorTests {
    static let issuer = "https://issuer.example"
    static let policy = ClaimsPolicy(issuer: issuer, audiences: ["com.example.app", "com.example.web"])
    static let now: Double = 1_700_000_000
    static let exp: Int64 = 1_700_000_600

    /// A payload that passes every rule, with `changes` applied (`nil` removes a claim).
    static func claims(_ changes: [String: JSONValue?] = [:]) -> [String: JSONValue] {
        var claims: [String: JSONValue] = [
            "iss": .string(issuer), "sub": "user-1", "aud": "com.example.app", "exp": .int(exp),
            "iat": .int(Int64(now) - 10), "extra": ["nested": [1, 2.5, nil]],
        ]
        for (name, value) in changes { claims[name] = value }
        return claims
    }

    @discardableResult
    static func validate(
        _ claims: [String: JSONValue], policy: ClaimsPolicy = policy, now: Double = now, audience: String? = nil,
        nonce: String? = nil
    ) throws(JOSEError) -> VerifiedToken {
        try ClaimsValidator.validate(claims: claims, policy: policy, now: now, audience: audience, nonce: nonce)
    }

    static func code(_ code: JOSEError.Code) -> JOSEError { JOSEError(code, "") }

    @Test("a valid payload yields its registered claims and the whole payload")
    func valid() throws {
        let token = try Self.validate(Self.claims())
        #expect(token.issuer == Self.issuer)
        #expect(token.subject == "user-1")
        #expect(token.audiences == ["com.example.app"])
        #expect(token.expiresAt == Double(Self.exp))
        #expect(token.issuedAt == Self.now - 10)
        #expect(token.notBefore == nil)
        #expect(token.claims == Self.claims())
        #expect(token.email == nil && token.emailVerified == nil && token.realUserStatus == nil)
    }

    @Test(
        "payload bytes must be a JSON object",
        arguments: ["", " ", "null", "[]", #""sub""#, "42", "{", "{} {}", #"{"a":1,"a":2}"#])
    func payloadNotObject(payload: String) {
        #expect(throws: Self.code(.tokenMalformed)) {
            try ClaimsValidator.validate(
                payload: Array(payload.utf8), policy: Self.policy, now: Self.now, audience: nil, nonce: nil)
        }
    }

    @Test("payload bytes that are a valid claims object pass")
    func payloadBytes() throws {
        let payload = #"{"iss":"https://issuer.example","sub":"s","aud":"com.example.web","exp":1700000600}"#
        let token = try ClaimsValidator.validate(
            payload: Array(payload.utf8), policy: Self.policy, now: Self.now, audience: nil, nonce: nil)
        #expect(token.subject == "s")
    }

    @Test(
        "iss must be exactly the issuer's",
        arguments: [
            nil, "https://issuer.example/", "https://Issuer.example", "https://other.example", "", 1,
            ["https://issuer.example"],
        ] as [JSONValue?])
    func issuer(iss: JSONValue?) {
        #expect(throws: Self.code(.tokenIssuerUnknown)) { try Self.validate(Self.claims(["iss": iss])) }
    }

    @Test("iss is compared byte for byte, not by Unicode equivalence")
    func issuerBytes() throws {
        let policy = ClaimsPolicy(issuer: "https://caf\u{E9}.example", audiences: ["com.example.app"])
        try Self.validate(Self.claims(["iss": "https://caf\u{E9}.example"]), policy: policy)
        #expect("https://cafe\u{301}.example" == "https://caf\u{E9}.example")  // Swift's == would let it through
        #expect(throws: Self.code(.tokenIssuerUnknown)) {
            try Self.validate(Self.claims(["iss": "https://cafe\u{301}.example"]), policy: policy)
        }
    }

    @Test("sub must be a non-empty string", arguments: [nil, "", 42, true, ["user-1"]] as [JSONValue?])
    func subject(sub: JSONValue?) {
        #expect(throws: Self.code(.tokenClaimInvalid)) { try Self.validate(Self.claims(["sub": sub])) }
    }

    @Test(
        "aud as a string or an array holding one configured audience passes",
        arguments: [
            "com.example.web", ["com.example.web"], ["other", "com.example.app"],
            ["com.example.app", "com.example.web"],
        ] as [JSONValue])
    func audienceAccepted(aud: JSONValue) throws {
        let token = try Self.validate(Self.claims(["aud": aud]))
        #expect(token.audiences == (aud.arrayValue?.map { $0.stringValue! } ?? [aud.stringValue!]))
    }

    @Test(
        "aud missing, malformed or holding no configured audience fails",
        arguments: [
            nil, "other", [], ["other", "another"], 42, ["com.example.app", 42], ["com.example.app": true],
            "COM.EXAMPLE.APP",
        ] as [JSONValue?])
    func audienceRefused(aud: JSONValue?) {
        #expect(throws: Self.code(.tokenAudienceInvalid)) { try Self.validate(Self.claims(["aud": aud])) }
    }

    @Test("an audience named by the request must be configured and in the token")
    func requestedAudience() throws {
        let both = Self.claims(["aud": ["com.example.app", "com.example.web"]])
        #expect(try Self.validate(both, audience: "com.example.web").audiences.count == 2)
        // Configured, but the token is for the other configured audience only.
        #expect(throws: Self.code(.tokenAudienceInvalid)) {
            try Self.validate(Self.claims(), audience: "com.example.web")
        }
        // In the token, but not configured: a caller must not widen the issuer's audiences.
        let foreign = Self.claims(["aud": ["com.example.app", "com.attacker.app"]])
        try Self.validate(foreign)
        #expect(throws: Self.code(.tokenAudienceInvalid)) { try Self.validate(foreign, audience: "com.attacker.app") }
    }

    @Test(
        "exp is required and must be a number",
        arguments: [nil, "1700000600", true, .null, [1_700_000_600], ["t": 1]] as [JSONValue?])
    func expirationType(exp: JSONValue?) {
        #expect(throws: Self.code(.tokenClaimInvalid)) { try Self.validate(Self.claims(["exp": exp])) }
    }

    @Test("nbf and iat, when present, must be numbers", arguments: ["nbf", "iat"])
    func otherTimeTypes(name: String) throws {
        for value: JSONValue in ["1699999990", true, .null, [1]] {
            #expect(throws: Self.code(.tokenClaimInvalid), "\(name): \(value)") {
                try Self.validate(Self.claims([name: value]))
            }
        }
        // A fractional NumericDate is a number.
        #expect(throws: Never.self) { try Self.validate(Self.claims([name: .double(Self.now - 0.5)])) }
    }

    @Test("exp: expired from exp + leeway on, valid just before")
    func expirationBoundary() throws {
        let exp = Double(Self.exp)
        try Self.validate(Self.claims(), now: exp)  // within the leeway
        try Self.validate(Self.claims(), now: exp + 59)
        try Self.validate(Self.claims(), now: exp + 59.999)
        #expect(throws: Self.code(.tokenExpired)) { try Self.validate(Self.claims(), now: exp + 60) }
        #expect(throws: Self.code(.tokenExpired)) { try Self.validate(Self.claims(), now: exp + 61) }
        // A fractional exp is compared as it is.
        try Self.validate(Self.claims(["exp": .double(exp + 0.5)]), now: exp + 60.25)
        #expect(throws: Self.code(.tokenExpired)) {
            try Self.validate(Self.claims(["exp": .double(exp + 0.5)]), now: exp + 60.5)
        }
    }

    @Test("nbf: not yet valid while more than the leeway in the future")
    func notBefore() throws {
        let now = Self.now
        #expect(try Self.validate(Self.claims(["nbf": .int(Int64(now) + 60)])).notBefore == now + 60)
        try Self.validate(Self.claims(["nbf": .int(Int64(now) - 1000)]))
        #expect(throws: Self.code(.tokenNotYetValid)) { try Self.validate(Self.claims(["nbf": .int(Int64(now) + 61)])) }
        #expect(throws: Self.code(.tokenNotYetValid)) { try Self.validate(Self.claims(["nbf": .double(now + 60.5)])) }
    }

    @Test("iat: a token issued more than the leeway in the future fails")
    func issuedInFuture() throws {
        let now = Self.now
        try Self.validate(Self.claims(["iat": .int(Int64(now) + 60)]))
        #expect(throws: Self.code(.tokenNotYetValid)) { try Self.validate(Self.claims(["iat": .int(Int64(now) + 61)])) }
        #expect(throws: Self.code(.tokenNotYetValid)) {
            try Self.validate(Self.claims(["iat": .int(Int64(now) + 86_400)]))
        }
        // iat is optional.
        #expect(try Self.validate(Self.claims(["iat": nil])).issuedAt == nil)
    }

    @Test("the leeway is configurable; a negative one counts as none")
    func leeway() throws {
        let exp = Double(Self.exp)
        let strict = ClaimsPolicy(issuer: Self.issuer, audiences: ["com.example.app"], leeway: 0)
        try Self.validate(Self.claims(), policy: strict, now: exp - 0.001)
        #expect(throws: Self.code(.tokenExpired)) { try Self.validate(Self.claims(), policy: strict, now: exp) }
        #expect(throws: Self.code(.tokenNotYetValid)) {
            try Self.validate(Self.claims(["nbf": .int(Int64(Self.now) + 1)]), policy: strict)
        }
        let negative = ClaimsPolicy(issuer: Self.issuer, audiences: ["com.example.app"], leeway: -3600)
        #expect(negative.leeway == 0)
        let generous = ClaimsPolicy(issuer: Self.issuer, audiences: ["com.example.app"], leeway: 300)
        try Self.validate(Self.claims(), policy: generous, now: exp + 299)
        #expect(ClaimsPolicy(issuer: Self.issuer, audiences: []).leeway == 60)
    }

    @Test("times that are not finite or a clock that is NaN never pass")
    func notFinite() {
        #expect(throws: Self.code(.tokenClaimInvalid)) { try Self.validate(Self.claims(["exp": .double(.nan)])) }
        #expect(throws: Self.code(.tokenClaimInvalid)) { try Self.validate(Self.claims(["exp": .double(.infinity)])) }
        #expect(throws: Self.code(.tokenClaimInvalid)) { try Self.validate(Self.claims(["nbf": .double(-.infinity)])) }
        #expect(throws: Self.code(.tokenExpired)) { try Self.validate(Self.claims(), now: .nan) }
    }

    // MARK: - Nonce

    /// SHA-256("abc"), FIPS 180-2 appendix B.1: fixed here so that the test does not trust `SHA256`.
    static let sha256OfABC = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"

    @Test("the request's nonce matches the token's raw or as its lowercase hex SHA-256")
    func nonceMatches() throws {
        try Self.validate(Self.claims(["nonce": "abc"]), nonce: "abc")
        #expect(
            try Self.validate(Self.claims(["nonce": .string(Self.sha256OfABC)]), nonce: "abc").nonce == Self.sha256OfABC
        )
    }

    @Test(
        "any other nonce fails",
        arguments: [
            "abd", "ABC", "", .string(sha256OfABC.uppercased()), .string(String(sha256OfABC.dropLast())), "abc ",
        ] as [JSONValue])
    func nonceMismatch(tokenNonce: JSONValue) {
        #expect(throws: Self.code(.tokenNonceMismatch)) {
            try Self.validate(Self.claims(["nonce": tokenNonce]), nonce: "abc")
        }
    }

    @Test("a nonce claim that is not a string fails", arguments: [.null, 42, true, ["abc"]] as [JSONValue])
    func nonceNotString(tokenNonce: JSONValue) {
        #expect(throws: Self.code(.tokenNonceMismatch)) {
            try Self.validate(Self.claims(["nonce": tokenNonce]), nonce: "abc")
        }
    }

    @Test("a request's nonce refuses a token without one (issue 26: no downgrade by leaving the nonce out)")
    func nonceAbsent() throws {
        for claims in [Self.claims(), Self.claims(["nonce_supported": false]), Self.claims(["nonce_supported": true]),
            Self.claims(["nonce_supported": "true"])]
        {
            #expect(throws: Self.code(.tokenNonceMismatch)) { try Self.validate(claims, nonce: "abc") }
        }
        // A cached token is checked again per request, under the same rule.
        let token = try Self.validate(Self.claims())
        #expect(throws: Self.code(.tokenNonceMismatch)) {
            try ClaimsValidator.check(token, policy: Self.policy, now: Self.now, audience: nil, nonce: "abc")
        }
    }

    @Test("allow_missing_nonce accepts a token without nonce, unless it says nonce_supported; a wrong nonce still fails")
    func nonceAbsentAllowed() throws {
        let relaxed = ClaimsPolicy(issuer: Self.issuer, audiences: ["com.example.app"], allowsMissingNonce: true)
        try Self.validate(Self.claims(), policy: relaxed, nonce: "abc")
        try Self.validate(Self.claims(["nonce_supported": false]), policy: relaxed, nonce: "abc")
        try ClaimsValidator.check(try Self.validate(Self.claims()), policy: relaxed, now: Self.now, audience: nil, nonce: "abc")
        for claims in [Self.claims(["nonce_supported": true]), Self.claims(["nonce_supported": "true"]), Self.claims(["nonce": "abd"]),
            Self.claims(["nonce": .null])]
        {
            #expect(throws: Self.code(.tokenNonceMismatch)) { try Self.validate(claims, policy: relaxed, nonce: "abc") }
        }
        try Self.validate(Self.claims(["nonce": "abc"]), policy: relaxed, nonce: "abc")
    }

    @Test("without a nonce in the request the token's nonce is not checked")
    func nonceNotRequested() throws {
        try Self.validate(Self.claims(["nonce": "anything"]))
        try Self.validate(Self.claims(["nonce_supported": true]))
    }

    // MARK: - Re-checking

    @Test("check applies the request's and the clock's rules again to a verified token")
    func recheck() throws {
        let token = try Self.validate(Self.claims(["nonce": "abc"]))
        try ClaimsValidator.check(token, policy: Self.policy, now: Self.now, audience: "com.example.app", nonce: "abc")
        #expect(throws: Self.code(.tokenExpired)) {
            try ClaimsValidator.check(token, policy: Self.policy, now: Double(Self.exp) + 60, audience: nil, nonce: nil)
        }
        #expect(throws: Self.code(.tokenAudienceInvalid)) {
            try ClaimsValidator.check(
                token, policy: Self.policy, now: Self.now, audience: "com.example.web", nonce: nil)
        }
        #expect(throws: Self.code(.tokenNonceMismatch)) {
            try ClaimsValidator.check(token, policy: Self.policy, now: Self.now, audience: nil, nonce: "abd")
        }
        #expect(token.isExpired(at: Double(Self.exp) + 60, leeway: 60))
        #expect(!token.isExpired(at: Double(Self.exp) + 59, leeway: 60))
    }

    @Test("when several rules fail, the first in the documented order is reported")
    func order() {
        #expect(throws: Self.code(.tokenIssuerUnknown)) {
            try Self.validate(Self.claims(["iss": "x", "sub": "", "exp": "soon", "aud": "other"]), now: 1e12)
        }
        #expect(throws: Self.code(.tokenClaimInvalid)) {
            try Self.validate(Self.claims(["exp": "soon", "aud": "other"]))
        }
        #expect(throws: Self.code(.tokenAudienceInvalid)) {
            try Self.validate(Self.claims(["aud": "other"]), now: 1e12)
        }
        #expect(throws: Self.code(.tokenExpired)) {
            try Self.validate(Self.claims(["nbf": 1e12, "nonce": "x"]), now: Double(Self.exp) + 60, nonce: "abc")
        }
    }
}
