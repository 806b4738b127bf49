import KeyholeStore
import Testing

@testable import KeyholeServer

/// The mark a user's record keeps of the last notification applied per kind of event.
@Suite("AppleNotificationMark")
struct AppleNotificationMarkTests {
    static let principal = Principal(issuer: "apple", sub: "001.m")

    @Test("new, duplicate (same jti, by its bytes) and stale (older, or older than the record)")
    func standing() {
        var user = User(principal: Self.principal, createdAt: 1000, updatedAt: 1000)
        #expect(AppleNotificationMark.standing(of: "a", issuedAt: 1000, family: "email", for: user) == .new)
        // Issued before the record was made: about an account before this one (signed up again).
        #expect(AppleNotificationMark.standing(of: "a", issuedAt: 999, family: "account", for: user) == .stale)
        AppleNotificationMark(issuedAt: 1500, jti: "K-1").store(in: &user, family: "email")
        #expect(AppleNotificationMark(user, family: "email") == AppleNotificationMark(issuedAt: 1500, jti: "K-1"))
        #expect(AppleNotificationMark(user, family: "consent") == nil)
        #expect(AppleNotificationMark.standing(of: "K-1", issuedAt: 1500, family: "email", for: user) == .duplicate)
        // KELVIN SIGN: another jti, though Swift calls the strings equal.
        #expect(AppleNotificationMark.standing(of: "\u{212A}-1", issuedAt: 1500, family: "email", for: user) == .new)
        #expect(AppleNotificationMark.standing(of: "b", issuedAt: 1499, family: "email", for: user) == .stale)
        #expect(AppleNotificationMark.standing(of: "b", issuedAt: 1501, family: "email", for: user) == .new)
        // Families are apart.
        #expect(AppleNotificationMark.standing(of: "b", issuedAt: 1200, family: "consent", for: user) == .new)
        // The mark lives under ext, which user.get does not show.
        #expect(user.fields.keys.sorted() == ["ext"])
    }

    @Test("event types and their families")
    func families() {
        #expect(AppleNotificationMark.family(of: "consent-revoked") == "consent")
        #expect(AppleNotificationMark.family(of: "email-disabled") == "email")
        #expect(AppleNotificationMark.family(of: "email-enabled") == "email")
        #expect(AppleNotificationMark.family(of: "account-delete") == "account")
        #expect(AppleNotificationMark.family(of: "account-deleted") == "account")
        #expect(AppleNotificationMark.family(of: "something-new") == nil)
    }
}
