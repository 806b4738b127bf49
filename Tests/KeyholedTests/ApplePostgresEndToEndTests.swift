import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// Sign in with Apple with `[storage] backend = "postgres"`: two keyholed on one database and one
/// fake Apple, as two hosts behind a load balancer. What one host stores of a grant, another uses;
/// a revocation owed is sent once, by whichever host can.
@Suite("Sign in with Apple on PostgreSQL, two hosts, end to end", .serialized, .ownThreads)
struct ApplePostgresEndToEndTests {
    typealias SignIn = AppleSignInEndToEndTests

    /// Two keyholed on `cluster` with one `[apple]` (the same team key and store key, as every host
    /// of a site has).
    static func startTwo(_ apple: FakeApple, _ cluster: PostgresCluster) throws -> [(DaemonProcess, RawConnection)] {
        let (_, appleConfig) = try SignIn.setUp(apple, extra: "web_return_origins = [\"https://app.example.com\"]\n")
        let config = appleConfig + "\n" + PostgresEndToEndTests.config(cluster)
        return try (0..<2).map { _ in
            let daemon = try DaemonProcess(config: config, directory: try DaemonProcess.makeDirectory())
            try daemon.waitUntilReady()
            return (daemon, try RawConnection(path: daemon.socketPath))
        }
    }

    @Test("signed in with a code on A: the session, the user and the sealed grant serve on B; consent revoked on B ends A's sessions; deleted on A, revoked at Apple once")
    func acrossHosts() async throws {
        let apple = try await FakeApple()
        let cluster = try await PostgresCluster.start()
        let hosts = try Self.startTwo(apple, cluster)
        let (a, connectionA) = hosts[0], (b, connectionB) = hosts[1]

        let sub = "001.pg.alice"
        let token = apple.identityToken(sub: sub, audience: SignIn.web, email: "alice@example.com", emailVerified: "true")
        let first = try connectionA.result("apple.sign_in", [
            "identity_token": .string(token),
            "authorization_code": .string(apple.issueCode(sub: sub, clientID: SignIn.web, redirectURI: SignIn.redirect)),
            "user": ["name": ["given": "Alice"]],
        ])
        #expect(first["created"] == true, "\(apple.refusals)")
        let session = try #require(first["session"]?["session"]?.stringValue)
        let refreshToken = try #require(apple.refreshTokens.keys.first)
        let read = try connectionB.result("session.get", ["session": .string(session)])
        #expect(read["sub"] == .string(sub) && read["user"]?["email"] == "alice@example.com" && read["user"]?["name"] == ["given": "Alice"])
        #expect(read["user"]?["ext"] == nil)

        // B opens the grant A sealed (one store key) and checks it at Apple.
        #expect(try connectionB.result("apple.refresh_check", ["sub": .string(sub)])["result"] == "valid")
        #expect(apple.tokenRequests.last?["refresh_token"] == refreshToken)

        // Consent withdrawn, told to B: A stops serving the session within max_staleness (3 s).
        let notification = apple.notification(type: "consent-revoked", sub: sub, audience: SignIn.web)
        let applied = try connectionB.result("apple.notification", ["payload": .string(notification)])
        #expect(applied["applied"] == true)
        var polled = ContinuousClock.now
        let endedOnA = try await PeerLimitsEndToEndTests.eventually { try connectionA.errorCode("session.get", ["session": .string(session)]) == "session_not_found" }
        #expect(endedOnA && ContinuousClock.now - polled < .seconds(5))
        #expect(try connectionA.result("user.get", ["sub": .string(sub)])["consent_revoked_at"]?.intValue != nil)
        // The same notification again, at A: the record's mark makes it a repeat.
        let again = try connectionA.result("apple.notification", ["payload": .string(notification)])
        #expect(again["applied"] == false && again["duplicate"] == true)

        // Signed in again (new consent) on B; deleted on A: the new grant is revoked at Apple, once.
        let second = try connectionB.result("apple.sign_in", [
            "identity_token": .string(apple.identityToken(sub: sub, audience: SignIn.web)),
            "authorization_code": .string(apple.issueCode(sub: sub, clientID: SignIn.web, redirectURI: SignIn.redirect)),
        ])
        let secondSession = try #require(second["session"]?["session"]?.stringValue)
        let issued = apple.refreshTokens.filter { $0.value }.keys.first { $0 != refreshToken }
        let newToken = try #require(issued)
        let deleted = try connectionA.result("user.delete", ["sub": .string(sub)])
        #expect(deleted["deleted"] == true && deleted["sessions_revoked"] == 1 && deleted["apple_revocation"] == "done")
        #expect(apple.revoked == [newToken])
        polled = ContinuousClock.now
        let endedOnB = try await PeerLimitsEndToEndTests.eventually { try connectionB.errorCode("session.get", ["session": .string(secondSession)]) == "session_not_found" }
        #expect(endedOnB && ContinuousClock.now - polled < .seconds(5))
        #expect(try connectionB.errorCode("user.get", ["sub": .string(sub)]) == "user_not_found")
        #expect(try connectionB.result("apple.pending", [:])["count"] == 0)

        // The database never held a refresh token (nor a session token) in clear.
        let dump = try #require(try await cluster.command("dump")["out"]?.stringValue)
        for secret in [refreshToken, newToken, session, secondSession] { #expect(!dump.contains(secret)) }
        #expect(try a.terminate() == 0)
        #expect(try b.terminate() == 0)
        for daemon in [a, b] { #expect(!daemon.stderr.contains(refreshToken) && !daemon.stderr.contains(newToken)) }
        #expect(await cluster.close() == 0)
        try await apple.close()
    }

    @Test("Apple down: a deletion on A queues the revocation, which B lists; A killed, B sends it once Apple is back, and only B")
    func revocationTakenOver() async throws {
        let apple = try await FakeApple()
        let cluster = try await PostgresCluster.start()
        let hosts = try Self.startTwo(apple, cluster)
        let (a, connectionA) = hosts[0], (b, connectionB) = hosts[1]
        let sub = "001.pg.bob"
        _ = try connectionA.result("apple.sign_in", [
            "identity_token": .string(apple.identityToken(sub: sub, audience: SignIn.web)),
            "authorization_code": .string(apple.issueCode(sub: sub, clientID: SignIn.web, redirectURI: SignIn.redirect)),
        ])
        let refreshToken = try #require(apple.refreshTokens.keys.first)
        apple.fail(with: .serviceUnavailable)
        let deleted = try connectionA.result("user.delete", ["sub": .string(sub)])
        #expect(deleted["deleted"] == true && deleted["apple_revocation"] == "pending")
        let pending = try connectionB.result("apple.pending", [:])
        #expect(pending["count"] == 1 && pending["pending"]?[0]?["sub"] == .string(sub) && pending["pending"]?[0]?["refresh_token"] == nil)

        a.kill()
        _ = try a.waitForExit()
        apple.recover()
        // B looks at the shared outbox every 15 s; A put the entry off by 5 s when Apple failed (polled
        // for up to 60 s).
        let polled = ContinuousClock.now
        let sent = try await PeerLimitsEndToEndTests.eventually { try connectionB.result("apple.pending", [:])["count"] == 0 }
        #expect(sent && ContinuousClock.now - polled < .seconds(45))
        #expect(apple.revoked == [refreshToken], "sent once")
        try b.waitForStderr(containing: "apple.revoked")
        #expect(try b.terminate() == 0)
        #expect(await cluster.close() == 0)
        try await apple.close()
    }

    @Test("on the web: started on A, Apple's callback taken by B (the pending sign-in is in the database); single use on every host; another browser's refused")
    func webAcrossHosts() async throws {
        typealias Web = AppleWebEndToEndTests
        let apple = try await FakeApple()
        let cluster = try await PostgresCluster.start()
        let hosts = try Self.startTwo(apple, cluster)
        let (a, connectionA) = hosts[0], (b, connectionB) = hosts[1]
        let sub = "001.pg.web"
        func form(_ started: Web.Started) -> JSONValue {
            [
                "state": .string(started.state),
                "code": .string(apple.issueCode(sub: sub, clientID: SignIn.web, redirectURI: SignIn.redirect)),
                "id_token": .string(apple.identityToken(sub: sub, audience: SignIn.web, nonce: started.nonce, email: "w@example.com")),
            ]
        }
        let started = try Web.authorize(connectionA, ["return_to": "/home"])
        let signedIn = try connectionB.result("apple.callback", ["form": form(started), "cookie": .string(started.cookie)])
        #expect(signedIn["created"] == true && signedIn["return_to"] == "/home", "\(apple.refusals)")
        let session = try #require(signedIn["session"]?["session"]?.stringValue)
        #expect(try connectionA.result("session.get", ["session": .string(session)])["sub"] == .string(sub))
        // Replayed at either host: the record was taken.
        for connection in [connectionA, connectionB] {
            #expect(try connection.errorCode("apple.callback", ["form": form(started), "cookie": .string(started.cookie)]) == "state_invalid")
        }
        // Another browser's cookie: refused, and the record is spent for its own browser too.
        let second = try Web.authorize(connectionB)
        let other = try Web.authorize(connectionB)
        #expect(try connectionA.errorCode("apple.callback", ["form": form(second), "cookie": .string(other.cookie)]) == "state_invalid")
        #expect(try connectionA.errorCode("apple.callback", ["form": form(second), "cookie": .string(second.cookie)]) == "state_invalid")
        // The database holds digests only: no state, nonce or binding in a dump.
        let dump = try #require(try await cluster.command("dump")["out"]?.stringValue)
        for secret in [other.state, other.nonce, other.cookie] { #expect(!dump.contains(secret)) }
        #expect(try a.terminate() == 0)
        #expect(try b.terminate() == 0)
        #expect(await cluster.close() == 0)
        try await apple.close()
    }
}
