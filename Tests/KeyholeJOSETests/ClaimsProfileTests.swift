import KeyholeJOSE
import KeyholeProtocol
import Testing

/// The profiles' normalisation, through `ClaimsValidator` on hand-made payloads.
@Suite("Claims profiles")
struct ClaimsProfileTests {
    static func claims(_ changes: [String: JSONValue?] = [:]) -> [String: JSONValue] {
        ClaimsValidatorTests.claims(changes)
    }

    static func validate(_ claims: [String: JSONValue], policy: ClaimsPolicy = ClaimsValidatorTests.policy)
        throws(JOSEError) -> VerifiedToken
    {
        try ClaimsValidatorTests.validate(claims, policy: policy)
    }

    static let invalid = JOSEError(.tokenClaimInvalid, "")

    static let apple = ClaimsPolicy(
        issuer: ClaimsValidatorTests.issuer, audiences: ["com.example.app"], profile: .apple)

    @Test(
        "Apple profile: email_verified and is_private_email become booleans",
        arguments: [
            ("true", true), ("false", false), (true, true), (false, false),
        ] as [(JSONValue, Bool)])
    func appleBooleans(value: JSONValue, expected: Bool) throws {
        let token = try Self.validate(
            Self.claims(["email_verified": value, "is_private_email": value]), policy: Self.apple)
        #expect(token.claims["email_verified"] == .bool(expected))
        #expect(token.claims["is_private_email"] == .bool(expected))
        #expect(token.emailVerified == expected)
        #expect(token.isPrivateEmail == expected)
    }

    @Test(
        "Apple profile: other spellings of the booleans fail",
        arguments: ["True", "1", "yes", "", 1, 0, .null, ["true"]] as [JSONValue])
    func appleBooleansRefused(value: JSONValue) {
        for name in ["email_verified", "is_private_email"] {
            #expect(throws: Self.invalid, "\(name): \(value)") {
                try Self.validate(Self.claims([name: value]), policy: Self.apple)
            }
        }
    }

    @Test("Apple profile: real_user_status is kept as an integer; anything else fails")
    func appleRealUserStatus() throws {
        for status: Int64 in [0, 1, 2] {
            let token = try Self.validate(Self.claims(["real_user_status": .int(status)]), policy: Self.apple)
            #expect(token.realUserStatus == status)
            #expect(token.claims["real_user_status"] == .int(status))
        }
        for value: JSONValue in ["2", 2.0, 1.5, true, .null] {
            #expect(throws: Self.invalid, "\(value)") {
                try Self.validate(Self.claims(["real_user_status": value]), policy: Self.apple)
            }
        }
    }

    @Test("Apple profile: unknown claims pass through unchanged, absent ones stay absent")
    func appleUnknownClaims() throws {
        let extra: [String: JSONValue?] = ["c_hash": "abc", "auth_time": 1_699_999_990, "email": "a@example.com"]
        let token = try Self.validate(Self.claims(extra), policy: Self.apple)
        #expect(token.claims == Self.claims(extra))
        #expect(token.email == "a@example.com")
        #expect(token.emailVerified == nil)
    }

    @Test("standard profile: claims pass through unchanged, even Apple's string booleans")
    func standardProfile() throws {
        let changes: [String: JSONValue?] = [
            "email_verified": "true", "real_user_status": "2", "email": "a@example.com",
        ]
        let token = try Self.validate(Self.claims(changes))
        #expect(token.claims == Self.claims(changes))
        #expect(token.emailVerified == nil)
        #expect(token.realUserStatus == nil)
        #expect(try Self.validate(Self.claims(["email_verified": true])).emailVerified == true)
    }

    @Test("normalise works in place: .standard changes nothing, .apple only the claims it knows")
    func normaliseDirectly() throws {
        let original: [String: JSONValue] = [
            "email_verified": "false", "is_private_email": true, "real_user_status": 1, "custom": "true",
        ]
        var standard = original
        try ClaimsProfile.standard.normalise(&standard)
        #expect(standard == original)
        var apple = original
        try ClaimsProfile.apple.normalise(&apple)
        #expect(apple == ["email_verified": false, "is_private_email": true, "real_user_status": 1, "custom": "true"])
        var empty: [String: JSONValue] = [:]
        try ClaimsProfile.apple.normalise(&empty)
        #expect(empty.isEmpty)
    }
}
