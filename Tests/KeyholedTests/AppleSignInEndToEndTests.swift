import Foundation
import KeyholeJOSE
import KeyholeProtocol
import KeyholeStore
import KeyholeTestSupport
import Testing

/// `apple.sign_in` through keyholed, against a fake Apple on loopback.
@Suite("Sign in with Apple, end to end", .serialized, .ownThreads)
struct AppleSignInEndToEndTests {
    static let app = "com.example.app"
    static let web = "com.example.web"
    static let redirect = "https://example.com/auth/apple"

    /// A directory with the team's key and a store key, and the configuration naming them.
    static func setUp(_ apple: FakeApple, storeKeyMode: mode_t = 0o600, extra: String = "") throws -> (URL, String) {
        let directory = try DaemonProcess.makeDirectory()
        let keyPath = directory.appendingPathComponent("AuthKey.p8").path
        let storeKeyPath = directory.appendingPathComponent("store.key").path
        try Data(apple.teamKey.pkcs8PEM()).write(to: URL(fileURLWithPath: keyPath))
        chmod(keyPath, 0o600)
        try Data((0..<32).map { _ in UInt8.random(in: 0...255) }).write(to: URL(fileURLWithPath: storeKeyPath))
        chmod(storeKeyPath, storeKeyMode)
        let config = """
            [[issuer]]
            name = "apple"
            preset = "apple"
            jwks_uri = "\(apple.keySetURL)"
            audiences = ["\(app)", "\(web)"]

            [apple]
            team_id = "\(apple.teamID)"
            key_id = "\(apple.keyID)"
            private_key_file = "\(keyPath)"
            store_key_file = "\(storeKeyPath)"
            redirect_uris = { "\(web)" = "\(redirect)" }
            endpoint = "\(apple.url)"
            \(extra)
            """
        return (directory, config)
    }

    static func start(_ apple: FakeApple) throws -> (DaemonProcess, RawConnection) {
        let (directory, config) = try setUp(apple)
        let daemon = try DaemonProcess(config: config, directory: directory)
        try daemon.waitUntilReady()
        return (daemon, try RawConnection(path: daemon.socketPath))
    }

    /// Every file under `directory`, as bytes.
    static func contents(of directory: URL) -> [UInt8] {
        var all: [UInt8] = []
        let files = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil)
        while let url = files?.nextObject() as? URL {
            if let data = try? Data(contentsOf: url) { all += data }
        }
        return all
    }

    @Test("first sign-in on the web with a code: user created with the name Apple sent once, refresh token sealed at rest; later sign-in from the app keeps the name")
    func firstAndLater() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try Self.start(apple)
        let sub = "001234.abcdef.0123"
        let token = apple.identityToken(sub: sub, audience: Self.web, email: "x7@privaterelay.appleid.com", emailVerified: "true", isPrivateEmail: "true")
        let code = apple.issueCode(sub: sub, clientID: Self.web, redirectURI: Self.redirect)
        let first = try connection.result("apple.sign_in", [
            "identity_token": .string(token), "authorization_code": .string(code),
            "user": ["email": "x7@privaterelay.appleid.com", "name": ["given": "Jane", "family": "Appleseed"]],
            "session": ["ttl_s": 3600, "data": ["from": "web"]],
        ])
        #expect(first["created"] == true, "\(apple.refusals)")
        #expect(first["user"]?["sub"] == .string(sub))
        #expect(first["user"]?["issuer"] == "apple")
        #expect(first["user"]?["name"] == ["given": "Jane", "family": "Appleseed"])
        // Apple's string booleans become booleans.
        #expect(first["user"]?["email_verified"] == true)
        #expect(first["user"]?["is_private_email"] == true)
        #expect(first["user"]?["ext"] == nil)
        // The code went to Apple under the token's client id, with the web client's redirect URI.
        let exchange = try #require(apple.tokenRequests.last)
        #expect(exchange["client_id"] == Self.web)
        #expect(exchange["redirect_uri"] == Self.redirect)
        #expect(apple.refusals.isEmpty)

        let session = try #require(first["session"]?["session"]?.stringValue)
        let got = try connection.result("session.get", ["session": .string(session)])
        #expect(got["sub"] == .string(sub))
        #expect(got["data"] == ["from": "web"])
        #expect(got["expires_at"] == first["session"]?["expires_at"])
        #expect(got["user"]?["name"]?["given"] == "Jane")

        // The refresh token Apple issued is nowhere in the state directory in clear.
        let refreshToken = try #require(apple.refreshTokens.keys.first)
        let stored = Self.contents(of: daemon.directory.appendingPathComponent("state"))
        #expect(!stored.isEmpty)
        #expect(stored.firstRange(of: Array(refreshToken.utf8)) == nil)
        #expect(!daemon.stderr.contains(refreshToken))

        // Later, from the iOS app (bundle ID), without the user object Apple sends only once and with
        // boolean flags: the stored name stays, the flags follow the token.
        let later = apple.identityToken(sub: sub, audience: Self.app, email: "x7@privaterelay.appleid.com", emailVerified: true, isPrivateEmail: false)
        let second = try connection.result("apple.sign_in", ["identity_token": .string(later)])
        #expect(second["created"] == false)
        #expect(second["user"]?["name"] == ["given": "Jane", "family": "Appleseed"])
        #expect(second["user"]?["email"] == "x7@privaterelay.appleid.com")
        #expect(second["user"]?["is_private_email"] == false)
        #expect(second["session"]?["session"] != first["session"]?["session"])
        #expect(try daemon.terminate() == 0)

        // After a restart the user (and the sealed token) are still there.
        let restarted = try DaemonProcess(config: try String(contentsOf: daemon.directory.appendingPathComponent("keyholed.toml"), encoding: .utf8), directory: daemon.directory)
        try restarted.waitUntilReady()
        let again = try RawConnection(path: restarted.socketPath)
        #expect(try again.result("user.get", ["sub": .string(sub)])["name"]?["family"] == "Appleseed")
        #expect(try again.result("session.get", ["session": .string(session)])["sub"] == .string(sub))
        #expect(try restarted.terminate() == 0)
        try? FileManager.default.removeItem(at: daemon.directory)
        try await apple.close()
    }

    @Test("a sign-in is one change: the user's record (with the sealed grant) and the session go in one batch of the log, so a crash keeps both or neither")
    func oneChange() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try Self.start(apple)
        let sub = "001234.onechange.0123"
        let token = apple.identityToken(sub: sub, audience: Self.web, email: "one@example.com", emailVerified: "true", isPrivateEmail: "false")
        let code = apple.issueCode(sub: sub, clientID: Self.web, redirectURI: Self.redirect)
        let signedIn = try connection.result("apple.sign_in", ["identity_token": .string(token), "authorization_code": .string(code)])
        #expect(signedIn["created"] == true, "\(apple.refusals)")
        #expect(try daemon.terminate() == 0)

        // The log as keyholed left it: the user.put of this sign-in and its session.create, in the
        // batch the user.put begins (the batch header just before it says how far the batch goes).
        let state = daemon.directory.appendingPathComponent("state").path
        let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: WALDirectory(stateDirectory: state).segmentPath(1))))
        let scan = WALScanner.scan(bytes, sequence: 1, isLast: true)
        let (userPut, sessionCreate): (UInt8, UInt8) = (0x20, 0x10)  // WALRecordTypes.md
        let types = scan.records.map(\.type)
        let put = try #require(types.firstIndex(of: userPut), "\(types)")
        let create = try #require(types.firstIndex(of: sessionCreate), "\(types)")
        #expect(types.filter { $0 == userPut }.count == 1, "\(types)")
        let header = try #require(WALBatchHeader(bytes, at: scan.offsets[put] - WALBatchHeader.size), "the user.put begins a batch")
        let end = scan.offsets[put] + Int(header.length)  // the batch's records start with the user.put
        #expect(create > put && scan.offsets[create] < end, "session.create at \(scan.offsets[create]), the user.put's batch ends at \(end)")
        try? FileManager.default.removeItem(at: daemon.directory)
        try await apple.close()
    }

    @Test("nonces raw and hashed; wrong audience, wrong nonce, reused code and Apple down each get their code")
    func refusals() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try Self.start(apple)
        // The app sent SHA-256(nonce) to Apple (the iOS way); the server passes the raw nonce.
        let raw = "n-0S6_WzA2Mj"
        let hashed = SHA256.digest(Array(raw.utf8))!.map { String(format: "%02x", $0) }.joined()
        let hashedToken = apple.identityToken(sub: "001.a", audience: Self.app, nonce: hashed)
        #expect(try connection.result("apple.sign_in", ["identity_token": .string(hashedToken), "nonce": .string(raw)])["created"] == true)
        let rawToken = apple.identityToken(sub: "001.b", audience: Self.app, nonce: raw)
        #expect(try connection.result("apple.sign_in", ["identity_token": .string(rawToken), "nonce": .string(raw)])["created"] == true)
        #expect(try connection.errorCode("apple.sign_in", ["identity_token": .string(rawToken), "nonce": "other"]) == "token_nonce_mismatch")
        // A token that carries a nonce does not sign in without it: a captured token is not enough.
        #expect(try connection.errorCode("apple.sign_in", ["identity_token": .string(rawToken)]) == "token_nonce_mismatch")

        // An email only the app gives (the token has none) is stored as unverified.
        let noEmail = apple.identityToken(sub: "001.f", audience: Self.app)
        let given = try connection.result("apple.sign_in", ["identity_token": .string(noEmail), "user": ["email": "f@example.com"]])
        #expect(given["user"]?["email"] == "f@example.com")
        #expect(given["user"]?["email_verified"] == false)

        let foreign = apple.identityToken(sub: "001.c", audience: "com.other.app")
        #expect(try connection.errorCode("apple.sign_in", ["identity_token": .string(foreign)]) == "token_audience_invalid")
        #expect(try connection.errorCode("apple.sign_in", ["identity_token": .string(rawToken), "client_id": "com.other.app"]) == "bad_request")
        #expect(try connection.errorCode("apple.sign_in", ["identity_token": .string(rawToken), "usr": [:]]) == "bad_request")
        #expect(try connection.errorCode("apple.sign_in", [:]) == "bad_request")

        // A code used twice: Apple's invalid_grant, passed on with what to check.
        let token = apple.identityToken(sub: "001.d", audience: Self.app)
        let code = apple.issueCode(sub: "001.d", clientID: Self.app)
        _ = try connection.result("apple.sign_in", ["identity_token": .string(token), "authorization_code": .string(code)])
        let reused = try connection.call("apple.sign_in", ["identity_token": .string(token), "authorization_code": .string(code)])
        #expect(reused["error"]?["code"] == "upstream_rejected")
        #expect(reused["error"]?["apple_error"] == "invalid_grant")
        // A code issued for the web client, presented with the app's token: exchanged as the app's,
        // which Apple refuses (the code is bound to its client).
        let webCode = apple.issueCode(sub: "001.d", clientID: Self.web, redirectURI: Self.redirect)
        #expect(try connection.call("apple.sign_in", ["identity_token": .string(token), "authorization_code": .string(webCode)])["error"]?["apple_error"] == "invalid_grant")

        // Apple down: upstream_unavailable with a retry hint, and no user was created.
        apple.fail(with: .serviceUnavailable)
        let downToken = apple.identityToken(sub: "001.e", audience: Self.app)
        let down = try connection.call("apple.sign_in", [
            "identity_token": .string(downToken), "authorization_code": .string(apple.issueCode(sub: "001.e", clientID: Self.app)),
        ])
        #expect(down["error"]?["code"] == "upstream_unavailable")
        #expect(down["error"]?["retry_after_ms"] == 2000)
        #expect(try connection.errorCode("user.get", ["sub": "001.e"]) == "user_not_found")
        apple.recover()
        #expect(try daemon.terminate() == 0)
        try? FileManager.default.removeItem(at: daemon.directory)
        try await apple.close()
    }

    @Test("keys from systemd credentials ($CREDENTIALS_DIRECTORY): a code is exchanged and its token sealed with the credential's key")
    func credentials() async throws {
        let apple = try await FakeApple()
        let (directory, config) = try Self.setUp(apple)
        defer { try? FileManager.default.removeItem(at: directory) }
        let credentials = directory.appendingPathComponent("credentials")
        try FileManager.default.createDirectory(at: credentials, withIntermediateDirectories: false)
        try FileManager.default.moveItem(at: directory.appendingPathComponent("AuthKey.p8"), to: credentials.appendingPathComponent("apple-key"))
        try FileManager.default.moveItem(at: directory.appendingPathComponent("store.key"), to: credentials.appendingPathComponent("store-key"))
        let fromCredentials = config
            .replacingOccurrences(of: "private_key_file = ", with: "private_key_credential = \"apple-key\"\n# ")
            .replacingOccurrences(of: "store_key_file = ", with: "store_key_credential = \"store-key\"\n# ")
        let daemon = try DaemonProcess(config: fromCredentials, directory: directory, environment: ["CREDENTIALS_DIRECTORY": credentials.path])
        try daemon.waitUntilReady()
        let connection = try RawConnection(path: daemon.socketPath)
        let (_, refreshToken) = try AppleDeletionEndToEndTests.signIn(apple, connection, sub: "001.cred.a")
        #expect(try connection.result("apple.refresh_check", ["sub": "001.cred.a"])["result"] == "valid")
        #expect(apple.refusals.isEmpty)
        #expect(try daemon.terminate() == 0)
        #expect(Self.contents(of: directory.appendingPathComponent("state")).firstRange(of: Array(refreshToken.utf8)) == nil)
        try await apple.close()
    }

    @Test("missing, unreadable, world-readable or malformed keys stop keyholed at start with exit 78; no [apple] is not_configured")
    func configurationErrors() async throws {
        let apple = try await FakeApple()
        func exitStatus(_ config: String, directory: URL) throws -> (Int32, String) {
            let daemon = try DaemonProcess(config: config, directory: directory)
            return (try daemon.waitForExit(), daemon.stderr)
        }
        let (directory, config) = try Self.setUp(apple, storeKeyMode: 0o644)
        let (status, stderr) = try exitStatus(config, directory: directory)
        #expect(status == 78)
        #expect(stderr.contains("store.key is accessible to every user"))

        chmod(directory.appendingPathComponent("store.key").path, 0o600)
        try Data("not a key".utf8).write(to: directory.appendingPathComponent("AuthKey.p8"))
        let (badKey, badKeyText) = try exitStatus(config, directory: directory)
        #expect(badKey == 78)
        #expect(badKeyText.contains("AuthKey.p8 is not a usable P-256 private key"))

        try FileManager.default.removeItem(at: directory.appendingPathComponent("AuthKey.p8"))
        let (missing, missingText) = try exitStatus(config, directory: directory)
        #expect(missing == 78)
        #expect(missingText.contains("cannot read") && missingText.contains("AuthKey.p8"))

        let noStoreKey = config.replacingOccurrences(of: "store_key_file", with: "# store_key_file")
        let (noStore, noStoreText) = try exitStatus(noStoreKey, directory: directory)
        #expect(noStore == 78)
        #expect(noStoreText.contains("apple.store_key_file"))

        let credential = config.replacingOccurrences(of: "private_key_file = ", with: "private_key_credential = \"apple-key\"\n# ")
        let (noCredentials, noCredentialsText) = try exitStatus(credential, directory: directory)
        #expect(noCredentials == 78)
        #expect(noCredentialsText.contains("CREDENTIALS_DIRECTORY"))

        // The packaged unit hands over /etc/keyhole/credentials/ whole: a file not put there is a
        // credential that is not there, and the message says where it goes.
        let emptyCredentials = directory.appendingPathComponent("empty-credentials")
        try FileManager.default.createDirectory(at: emptyCredentials, withIntermediateDirectories: false)
        let packaged = config.replacingOccurrences(of: "private_key_file = ", with: "private_key_credential = \"keyhole_apple-key\"\n# ")
        let absent = try DaemonProcess(config: packaged, directory: directory, environment: ["CREDENTIALS_DIRECTORY": emptyCredentials.path])
        #expect(try absent.waitForExit() == 78)
        #expect(absent.stderr.contains("credential 'keyhole_apple-key' is not in $CREDENTIALS_DIRECTORY"), "\(absent.stderr)")
        #expect(absent.stderr.contains("/etc/keyhole/credentials/apple-key"), "\(absent.stderr)")
        try? FileManager.default.removeItem(at: directory)

        let plain = try DaemonProcess.start(config: "")
        let connection = try RawConnection(path: plain.socketPath)
        #expect(try connection.errorCode("apple.sign_in", ["identity_token": "x"]) == "not_configured")
        #expect(try plain.terminate() == 0)
        try await apple.close()
    }
}
