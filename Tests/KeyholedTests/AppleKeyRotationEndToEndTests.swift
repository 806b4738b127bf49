import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// The team's `.p8` key rotated without a restart: a reload reads `[apple]`'s key again, all or
/// nothing, against a fake Apple that takes only the newest key's client secrets.
@Suite("Apple team key rotated by a reload, end to end", .serialized, .ownThreads)
struct AppleKeyRotationEndToEndTests {
    typealias SignIn = AppleSignInEndToEndTests

    /// A sign-in on the web with a code for `sub`: the answer, or the error code.
    static func signIn(_ apple: FakeApple, _ connection: RawConnection, sub: String) throws -> JSONValue {
        try connection.call("apple.sign_in", [
            "identity_token": .string(apple.identityToken(sub: sub, audience: SignIn.web)),
            "authorization_code": .string(apple.issueCode(sub: sub, clientID: SignIn.web, redirectURI: SignIn.redirect)),
        ])
    }

    /// The `kid` in the header of the client secret of Apple's last token request.
    static func lastSecretKeyID(_ apple: FakeApple) throws -> String? {
        let secret = try #require(apple.tokenRequests.last?["client_secret"])
        let header = try #require(OpenSSLTool.bytes(base64URL: secret.split(separator: ".")[0]))
        return try JSONValue.parse(bytes: header)["kid"]?.stringValue
    }

    @Test("a key that does not read fails the reload and the running key stays; a new key and key id, or the same file rewritten, are used by the next sign-in and revocation")
    func rotated() async throws {
        let apple = try await FakeApple()
        let (directory, config) = try SignIn.setUp(apple)
        defer { try? FileManager.default.removeItem(at: directory) }
        let daemon = try DaemonProcess(config: config, directory: directory)
        try daemon.waitUntilReady()
        let connection = try RawConnection(path: daemon.socketPath)
        let first = try Self.signIn(apple, connection, sub: "001.rot.a")
        #expect(first["result"]?["created"] == true, "\(first) \(apple.refusals)")
        let keyPath = directory.appendingPathComponent("AuthKey.p8")

        // A key file that is not a key: the reload fails as a whole, and code exchange goes on with
        // the key read at start-up.
        let original = try Data(contentsOf: keyPath)
        try Data("not a key\n".utf8).write(to: keyPath)
        let refused = try connection.call("admin.reload")
        #expect(refused["error"]?["code"] == "config_invalid")
        #expect(refused["error"]?["message"]?.stringValue?.contains("apple.private_key") == true, "\(refused)")
        #expect(try Self.signIn(apple, connection, sub: "001.rot.b")["result"]?["created"] == true, "\(apple.refusals)")
        try original.write(to: keyPath)

        // The developer revokes the key at Apple and makes another: Apple refuses the old one's
        // secrets until keyholed is told of the new key.
        let newKey = try apple.rotateTeamKey(keyID: "KEYB765432")
        let stale = try Self.signIn(apple, connection, sub: "001.rot.c")
        #expect(stale["error"]?["code"] == "upstream_rejected", "\(stale)")
        #expect(apple.refusals.last?.contains("not the key id KEYB765432") == true, "\(apple.refusals)")

        // The new key in a file of its own, named with its key id: one reload, no restart.
        let newPath = directory.appendingPathComponent("AuthKey_KEYB765432.p8")
        try Data(newKey.pkcs8PEM()).write(to: newPath)
        chmod(newPath.path, 0o600)
        try ReloadEndToEndTests.rewrite(daemon, config
            .replacingOccurrences(of: "key_id = \"KEY1234567\"", with: "key_id = \"KEYB765432\"")
            .replacingOccurrences(of: keyPath.path, with: newPath.path))
        let applied = try connection.result("admin.reload")
        #expect(applied["applied"] == ["apple.key_id", "apple.private_key"])
        #expect(applied["needs_restart"] == [])
        let after = try Self.signIn(apple, connection, sub: "001.rot.c")
        #expect(after["result"]?["created"] == true, "\(after) \(apple.refusals)")
        #expect(try Self.lastSecretKeyID(apple) == "KEYB765432")

        // Revocations, set up at start-up, take the new key too: Apple takes the refresh token back.
        let revokedBefore = apple.revoked.count
        #expect(try connection.result("user.delete", ["sub": "001.rot.a"])["apple_revocation"] == "done")
        #expect(apple.revoked.count == revokedBefore + 1)

        // Rotated again, the same file rewritten in place: the reload finds the new key in it.
        let third = try apple.rotateTeamKey(keyID: "KEYC765432")
        try Data(third.pkcs8PEM()).write(to: newPath)
        try ReloadEndToEndTests.rewrite(daemon, config
            .replacingOccurrences(of: "key_id = \"KEY1234567\"", with: "key_id = \"KEYC765432\"")
            .replacingOccurrences(of: keyPath.path, with: newPath.path))
        #expect(try connection.result("admin.reload")["applied"] == ["apple.key_id", "apple.private_key"])
        #expect(try Self.signIn(apple, connection, sub: "001.rot.d")["result"]?["created"] == true, "\(apple.refusals)")
        #expect(try Self.lastSecretKeyID(apple) == "KEYC765432")
        // A reload that changes nothing names nothing: the same key read again is no change.
        #expect(try connection.result("admin.reload")["applied"] == [])

        // A file that turns code exchange off (a restart's change), the key deleted: the reload says
        // so and goes on, rather than failing for the key it no longer names; the running key stays.
        try FileManager.default.removeItem(at: newPath)
        let without = config.split(separator: "\n", omittingEmptySubsequences: false)
            .filter { !["team_id", "key_id", "private_key_file", "store_key_file"].contains(where: $0.trimmingCharacters(in: .whitespaces).hasPrefix) }
            .joined(separator: "\n")
        try ReloadEndToEndTests.rewrite(daemon, without)
        let off = try connection.result("admin.reload")
        #expect(off["needs_restart"] == ["apple"], "\(off)")
        #expect(try Self.signIn(apple, connection, sub: "001.rot.e")["result"]?["created"] == true, "\(apple.refusals)")

        // One connection throughout (a restart would have closed it), and no key in the log.
        #expect(try connection.result("ping")["protocol"] == 1)
        #expect(try daemon.terminate() == 0)
        #expect(daemon.stderr.contains("config.reload_failed"))
        #expect(!daemon.stderr.contains("BEGIN PRIVATE KEY"))
        try await apple.close()
    }
}
