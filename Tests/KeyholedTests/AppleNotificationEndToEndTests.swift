import Foundation
import KeyholeJOSE
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// `apple.notification` through keyholed: Apple's server-to-server notifications, signed by a fake
/// Apple's key set, applied once; forged, expired and malformed ones refused with their codes.
@Suite("Apple notifications, end to end", .serialized, .ownThreads)
struct AppleNotificationEndToEndTests {
    typealias SignIn = AppleSignInEndToEndTests

    @Test("consent-revoked, email-disabled/enabled, account-delete(d): each applied once; a repeat is a duplicate")
    func events() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try SignIn.start(apple)
        let (session, _) = try AppleDeletionEndToEndTests.signIn(apple, connection, sub: "001.n.a")
        _ = try connection.result("apple.sign_in", ["identity_token": .string(apple.identityToken(sub: "001.n.b", audience: SignIn.app))])
        _ = try connection.result("apple.sign_in", ["identity_token": .string(apple.identityToken(sub: "001.n.c", audience: SignIn.app))])

        // Consent revoked (events as a string, Apple's way): sessions revoked, the token dropped.
        let revoked = apple.notification(type: "consent-revoked", sub: "001.n.a", audience: SignIn.app)
        #expect(try connection.result("apple.notification", ["payload": .string(revoked)])
            == ["type": "consent-revoked", "sub": "001.n.a", "applied": true, "duplicate": false])
        #expect(try connection.errorCode("session.get", ["session": .string(session)]) == "session_not_found")
        #expect(try connection.result("user.get", ["sub": "001.n.a"])["consent_revoked_at"]?.intValue != nil)
        #expect(try connection.result("apple.refresh_check", ["sub": "001.n.a"]) == ["result": "no_token"])
        // Apple retries until it gets a 200: the same notification again changes nothing.
        #expect(try connection.result("apple.notification", ["payload": .string(revoked)])
            == ["type": "consent-revoked", "sub": "001.n.a", "applied": false, "duplicate": true])

        // Email forwarding off and on (events as an object, flags as strings or booleans).
        let disabled = apple.notification(
            type: "email-disabled", sub: "001.n.b", audience: SignIn.app,
            event: ["email": "b7@privaterelay.appleid.com", "is_private_email": "true"], eventsAsObject: true)
        #expect(try connection.result("apple.notification", ["payload": .string(disabled)])["applied"] == true)
        var user = try connection.result("user.get", ["sub": "001.n.b"])
        #expect(user["email_enabled"] == false)
        #expect(user["email"] == "b7@privaterelay.appleid.com")
        #expect(user["is_private_email"] == true)
        let enabled = apple.notification(type: "email-enabled", sub: "001.n.b", audience: SignIn.app, event: ["is_private_email": true])
        #expect(try connection.result("apple.notification", ["payload": .string(enabled)])["applied"] == true)
        user = try connection.result("user.get", ["sub": "001.n.b"])
        #expect(user["email_enabled"] == true)

        // Account deleted at Apple, under either name; a user keyholed does not know is not applied.
        let deleted = apple.notification(type: "account-delete", sub: "001.n.c", audience: SignIn.app)
        #expect(try connection.result("apple.notification", ["payload": .string(deleted)])["applied"] == true)
        #expect(try connection.errorCode("user.get", ["sub": "001.n.c"]) == "user_not_found")
        let unknown = apple.notification(type: "account-deleted", sub: "001.n.nobody", audience: SignIn.app)
        #expect(try connection.result("apple.notification", ["payload": .string(unknown)])
            == ["type": "account-deleted", "sub": "001.n.nobody", "applied": false, "duplicate": false])
        // A type keyholed does not act on is answered, not refused: Apple would retry a refusal forever.
        let other = apple.notification(type: "something-new", sub: "001.n.b", audience: SignIn.app)
        #expect(try connection.result("apple.notification", ["payload": .string(other)])["applied"] == false)
        #expect(try daemon.terminate() == 0)
        try await apple.close()
    }

    @Test("a consent-revoked issued before the user granted consent again is not applied")
    func staleConsentRevoked() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try SignIn.start(apple)
        let sub = "001.n.stale"
        let (session, _) = try AppleDeletionEndToEndTests.signIn(apple, connection, sub: sub)
        // Delivered late (Apple retries for hours): issued ten minutes before this sign-in's grant.
        let issuedAt = Int64(Date().timeIntervalSince1970) - 600
        let stale = apple.notification(type: "consent-revoked", sub: sub, audience: SignIn.app, claims: ["iat": .int(issuedAt)])
        #expect(try connection.result("apple.notification", ["payload": .string(stale)])
            == ["type": "consent-revoked", "sub": .string(sub), "applied": false, "duplicate": false])
        #expect(try connection.result("session.get", ["session": .string(session)])["sub"] == .string(sub))
        #expect(try connection.result("user.get", ["sub": .string(sub)])["consent_revoked_at"] == nil)
        #expect(try connection.result("apple.refresh_check", ["sub": .string(sub)])["result"] == "valid")

        // One issued now is newer than the grant: applied.
        let current = apple.notification(type: "consent-revoked", sub: sub, audience: SignIn.app)
        #expect(try connection.result("apple.notification", ["payload": .string(current)])["applied"] == true)
        #expect(try connection.errorCode("session.get", ["session": .string(session)]) == "session_not_found")
        #expect(try daemon.terminate() == 0)
        try await apple.close()
    }

    @Test("after a restart, a notification applied before is a duplicate (its mark is in the user's record); an older one of the same kind is not applied over a newer")
    func replayAfterRestart() async throws {
        let apple = try await FakeApple()
        var (daemon, connection) = try SignIn.start(apple)
        let sub = "001.n.replay"
        _ = try AppleDeletionEndToEndTests.signIn(apple, connection, sub: sub)
        let now = Int64(Date().timeIntervalSince1970)
        let revoked = apple.notification(type: "consent-revoked", sub: sub, audience: SignIn.app)
        #expect(try connection.result("apple.notification", ["payload": .string(revoked)])["applied"] == true)
        // Email forwarding turned off, then on: the later one wins even when the earlier comes last.
        let disabled = apple.notification(type: "email-disabled", sub: sub, audience: SignIn.app, claims: ["iat": .int(now + 1)])
        let enabled = apple.notification(type: "email-enabled", sub: sub, audience: SignIn.app, claims: ["iat": .int(now + 2)])
        #expect(try connection.result("apple.notification", ["payload": .string(enabled)])["applied"] == true)
        #expect(try connection.result("apple.notification", ["payload": .string(disabled)])
            == ["type": "email-disabled", "sub": .string(sub), "applied": false, "duplicate": false])
        #expect(try connection.result("user.get", ["sub": .string(sub)])["email_enabled"] == true)

        // keyholed restarts: the jtis it saw in memory are gone.
        #expect(try daemon.terminate() == 0)
        daemon = try DaemonProcess(
            config: try String(contentsOf: daemon.directory.appendingPathComponent("keyholed.toml"), encoding: .utf8), directory: daemon.directory)
        try daemon.waitUntilReady()
        connection = try RawConnection(path: daemon.socketPath)
        // The user signs in again (without a code: no new grant), then Apple delivers the old
        // consent-revoked once more. It must not revoke the new session.
        let again = try connection.result("apple.sign_in", ["identity_token": .string(apple.identityToken(sub: sub, audience: SignIn.app))])
        let session = try #require(again["session"]?["session"]?.stringValue)
        #expect(try connection.result("apple.notification", ["payload": .string(revoked)])
            == ["type": "consent-revoked", "sub": .string(sub), "applied": false, "duplicate": true])
        #expect(try connection.result("session.get", ["session": .string(session)])["sub"] == .string(sub))
        #expect(try connection.result("apple.notification", ["payload": .string(enabled)])["duplicate"] == true)
        #expect(try connection.result("apple.notification", ["payload": .string(disabled)])["applied"] == false)
        #expect(try connection.result("user.get", ["sub": .string(sub)])["email_enabled"] == true)
        // A notification without iat is refused: nothing could order it.
        let undated = apple.notification(type: "email-disabled", sub: sub, audience: SignIn.app, claims: ["iat": .null])
        #expect(try connection.errorCode("apple.notification", ["payload": .string(undated)]) == "token_claim_invalid")
        #expect(try daemon.terminate() == 0)
        try await apple.close()
    }

    @Test("forged, expired, foreign and malformed notifications are refused with their codes; nothing changes")
    func refused() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try SignIn.start(apple)
        let (session, _) = try AppleDeletionEndToEndTests.signIn(apple, connection, sub: "001.n.x")
        let sub = "001.n.x"
        let cases: [(String, JSONValue, String)] = [
            ("not a JWT", "not.a.jwt", "token_malformed"),
            ("no payload", .null, "bad_request"),
            ("forged", .string(apple.notification(type: "account-delete", sub: sub, audience: SignIn.app, forged: true)), "token_signature_invalid"),
            ("another app's", .string(apple.notification(type: "account-delete", sub: sub, audience: "com.other.app")), "token_audience_invalid"),
            ("expired", .string(apple.notification(type: "account-delete", sub: sub, audience: SignIn.app, lifetime: -3600)), "token_expired"),
            ("another issuer", .string(apple.notification(type: "account-delete", sub: sub, audience: SignIn.app, claims: ["iss": "https://evil.example"])), "token_issuer_unknown"),
            ("no jti", .string(apple.notification(type: "account-delete", sub: sub, audience: SignIn.app, claims: ["jti": .null])), "token_claim_invalid"),
            ("no exp", .string(apple.notification(type: "account-delete", sub: sub, audience: SignIn.app, claims: ["exp": .null])), "token_claim_invalid"),
            ("events not JSON", .string(apple.notification(type: "account-delete", sub: sub, audience: SignIn.app, claims: ["events": "{type"])), "token_claim_invalid"),
            ("events without sub", .string(apple.notification(type: "account-delete", sub: sub, audience: SignIn.app, claims: ["events": ["type": "account-delete"]])), "token_claim_invalid"),
            ("an identity token", .string(apple.identityToken(sub: sub, audience: SignIn.app)), "token_claim_invalid"),
        ]
        for (name, payload, code) in cases {
            let args: [String: JSONValue] = payload == .null ? [:] : ["payload": payload]
            #expect(try connection.errorCode("apple.notification", args) == code, "\(name)")
        }
        #expect(try connection.result("session.get", ["session": .string(session)])["sub"] == .string(sub))
        #expect(try connection.result("ping", [:])["protocol"] != nil)
        #expect(try daemon.terminate() == 0)
        try await apple.close()
    }
}
