import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// `user.delete` of Apple users through keyholed: the refresh token is revoked at Apple, at once or,
/// when Apple is down, from the outbox, after a restart if need be.
@Suite("Apple account deletion, end to end", .serialized, .ownThreads)
struct AppleDeletionEndToEndTests {
    typealias SignIn = AppleSignInEndToEndTests

    /// Signs `sub` in on the web with a code; returns their session and the refresh token Apple issued.
    static func signIn(_ apple: FakeApple, _ connection: RawConnection, sub: String) throws -> (session: String, refreshToken: String) {
        let before = Set(apple.refreshTokens.keys)
        let answer = try connection.result("apple.sign_in", [
            "identity_token": .string(apple.identityToken(sub: sub, audience: SignIn.web)),
            "authorization_code": .string(apple.issueCode(sub: sub, clientID: SignIn.web, redirectURI: SignIn.redirect)),
        ])
        let session = try #require(answer["session"]?["session"]?.stringValue)
        let issued = try #require(Set(apple.refreshTokens.keys).subtracting(before).first)
        return (session, issued)
    }

    @Test("deleting an Apple user revokes their refresh token at Apple under its client; a user without one is only deleted")
    func revokedAtOnce() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try SignIn.start(apple)
        let (session, refreshToken) = try Self.signIn(apple, connection, sub: "001.del.a")
        let deleted = try connection.result("user.delete", ["sub": "001.del.a"])
        #expect(deleted["deleted"] == true)
        #expect(deleted["sessions_revoked"] == 1)
        #expect(deleted["apple_revocation"] == "done")
        #expect(apple.revoked == [refreshToken])
        #expect(apple.refreshTokens[refreshToken] == false)
        #expect(try connection.errorCode("user.get", ["sub": "001.del.a"]) == "user_not_found")
        #expect(try connection.errorCode("session.get", ["session": .string(session)]) == "session_not_found")
        #expect(try connection.result("apple.pending", [:])["count"] == 0)
        #expect(try connection.result("stats", [:])["apple"]?["revocations"] == ["pending": 0, "done": 1, "failures": 0])
        try daemon.waitForStderr(containing: "apple.revoked")

        // Signed in without a code: nothing to revoke, and no member saying so.
        _ = try connection.result("apple.sign_in", ["identity_token": .string(apple.identityToken(sub: "001.del.b", audience: SignIn.app))])
        let plain = try connection.result("user.delete", ["sub": "001.del.b"])
        #expect(plain["deleted"] == true && plain["apple_revocation"] == nil)
        #expect(apple.revoked.count == 1)
        #expect(try daemon.terminate() == 0)
        // Complete once keyholed exited: the token was never logged.
        #expect(!daemon.stderr.contains(refreshToken))
        try await apple.close()
    }

    @Test("deletion while Apple is down: the user goes at once, the revocation waits in the outbox and is delivered after a restart")
    func deliveredAfterRestart() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try SignIn.start(apple)
        let (session, refreshToken) = try Self.signIn(apple, connection, sub: "001.del.c")
        apple.fail(with: .serviceUnavailable)
        let deleted = try connection.result("user.delete", ["sub": "001.del.c"])
        #expect(deleted["deleted"] == true)
        #expect(deleted["apple_revocation"] == "pending")
        #expect(try connection.errorCode("user.get", ["sub": "001.del.c"]) == "user_not_found")
        #expect(try connection.errorCode("session.get", ["session": .string(session)]) == "session_not_found")

        let pending = try connection.result("apple.pending", [:])
        #expect(pending["count"] == 1)
        let entry = try #require(pending["pending"]?.arrayValue?.first)
        #expect(entry["sub"] == "001.del.c")
        #expect(entry["client_id"] == .string(SignIn.web))
        #expect((entry["attempts"]?.intValue ?? 0) >= 1)
        #expect(entry["last_error"]?.stringValue?.contains("unavailable") == true)
        #expect(entry["refresh_token"] == nil)
        #expect(try connection.result("stats", [:])["apple"]?["revocations"]?["pending"] == 1)
        #expect(apple.revoked.isEmpty)
        #expect(try daemon.terminate() == 0)
        // Queued, the token is still sealed: nowhere in the state directory in clear.
        let stateDirectory = daemon.directory.appendingPathComponent("state")
        #expect(SignIn.contents(of: stateDirectory).firstRange(of: Array(refreshToken.utf8)) == nil)

        apple.recover()
        let config = try String(contentsOf: daemon.directory.appendingPathComponent("keyholed.toml"), encoding: .utf8)
        // Started without [apple] (a configuration mistake): the revocation is kept, and said to wait.
        let withoutApple = try DaemonProcess(config: String(config[..<config.range(of: "[apple]")!.lowerBound]), directory: daemon.directory)
        try withoutApple.waitUntilReady()
        try withoutApple.waitForStderr(containing: "apple.revocations_waiting")
        #expect(withoutApple.stderr.contains("apple.revocations_waiting count=1 "))
        #expect(try withoutApple.terminate() == 0)
        #expect(apple.revoked.isEmpty)

        let restarted = try DaemonProcess(config: config, directory: daemon.directory)
        try restarted.waitUntilReady()
        try restarted.waitForStderr(containing: "apple.revoked")
        #expect(apple.revoked == [refreshToken])
        let again = try RawConnection(path: restarted.socketPath)
        #expect(try again.result("apple.pending", [:])["count"] == 0)
        #expect(try again.errorCode("user.get", ["sub": "001.del.c"]) == "user_not_found")
        #expect(try restarted.terminate() == 0)
        #expect(!daemon.stderr.contains(refreshToken) && !restarted.stderr.contains(refreshToken))

        // Done is durable too: a third start has nothing to send.
        let third = try DaemonProcess(config: config, directory: daemon.directory)
        try third.waitUntilReady()
        #expect(try RawConnection(path: third.socketPath).result("apple.pending", [:])["count"] == 0)
        #expect(try third.terminate() == 0)
        #expect(apple.revoked.count == 1)
        try? FileManager.default.removeItem(at: daemon.directory)
        try await apple.close()
    }
}
