import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// `apple.refresh_check` through keyholed: the check the background service makes once a day, run on
/// demand, finding consent withdrawn at a fake Apple.
@Suite("Apple refresh-token checks, end to end", .serialized, .ownThreads)
struct AppleRefreshCheckEndToEndTests {
    typealias SignIn = AppleSignInEndToEndTests

    static func start(_ apple: FakeApple, extra: String = "") throws -> (DaemonProcess, RawConnection) {
        let (directory, config) = try SignIn.setUp(apple, extra: extra)
        let daemon = try DaemonProcess(config: config, directory: directory)
        try daemon.waitUntilReady()
        return (daemon, try RawConnection(path: daemon.socketPath))
    }

    @Test("consent withdrawn at Apple: the check revokes the user's sessions and drops the token; the user stays")
    func consentWithdrawn() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try Self.start(apple)
        let sub = "001.check.a"
        let (session, refreshToken) = try AppleDeletionEndToEndTests.signIn(apple, connection, sub: sub)
        #expect(try connection.result("apple.refresh_check", ["sub": .string(sub)]) == ["result": "valid"])
        #expect(apple.tokenRequests.last?["grant_type"] == "refresh_token")
        #expect(apple.tokenRequests.last?["client_id"] == .some(SignIn.web))
        #expect(try connection.result("session.get", ["session": .string(session)])["sub"] == .string(sub))

        apple.withdrawConsent(sub: sub)
        let revoked = try connection.result("apple.refresh_check", ["sub": .string(sub)])
        #expect(revoked == ["result": "consent_revoked", "sessions_revoked": 1])
        #expect(try connection.errorCode("session.get", ["session": .string(session)]) == "session_not_found")
        #expect(try connection.result("user.get", ["sub": .string(sub)])["sub"] == .string(sub))
        #expect(try connection.result("apple.refresh_check", ["sub": .string(sub)]) == ["result": "no_token"])
        #expect(try connection.errorCode("apple.refresh_check", ["sub": "001.nobody"]) == "user_not_found")
        #expect(try connection.result("stats", [:])["apple"]?["refresh_checks"] == ["done": 2, "consent_revoked": 1, "failures": 0])
        try daemon.waitForStderr(containing: "apple.consent_revoked")

        // Apple down: upstream_unavailable, and nothing changes.
        let other = "001.check.b"
        let (otherSession, _) = try AppleDeletionEndToEndTests.signIn(apple, connection, sub: other)
        apple.fail(with: .serviceUnavailable)
        #expect(try connection.errorCode("apple.refresh_check", ["sub": .string(other)]) == "upstream_unavailable")
        #expect(try connection.result("session.get", ["session": .string(otherSession)])["sub"] == .string(other))
        apple.recover()
        // The token was dropped with consent: deleting the user owes Apple nothing.
        #expect(try connection.result("user.delete", ["sub": .string(sub)])["apple_revocation"] == nil)
        #expect(try daemon.terminate() == 0)
        #expect(!daemon.stderr.contains(refreshToken))
        try await apple.close()
    }

    @Test("on_revoked = \"flag\": the sessions stay, the token goes")
    func flag() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try Self.start(apple, extra: "on_revoked = \"flag\"")
        let sub = "001.check.f"
        let (session, _) = try AppleDeletionEndToEndTests.signIn(apple, connection, sub: sub)
        apple.withdrawConsent(sub: sub)
        #expect(try connection.result("apple.refresh_check", ["sub": .string(sub)]) == ["result": "consent_revoked", "sessions_revoked": 0])
        // The application sees the flag on the session's user, and acts on it.
        let flagged = try connection.result("session.get", ["session": .string(session)])
        #expect(flagged["sub"] == .string(sub))
        let revokedAt = try #require(flagged["user"]?["consent_revoked_at"]?.intValue)
        #expect(try connection.result("user.get", ["sub": .string(sub)])["consent_revoked_at"] == .int(revokedAt))
        #expect(try connection.result("apple.refresh_check", ["sub": .string(sub)]) == ["result": "no_token"])
        // Signing in again with a code is new consent: the flag goes.
        _ = try AppleDeletionEndToEndTests.signIn(apple, connection, sub: sub)
        #expect(try connection.result("user.get", ["sub": .string(sub)])["consent_revoked_at"] == nil)
        #expect(try daemon.terminate() == 0)
        try await apple.close()
    }
}
