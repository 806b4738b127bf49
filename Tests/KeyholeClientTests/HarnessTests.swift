import Foundation
import KeyholeClient
import KeyholeProtocol
import Synchronization
import Testing

/// The client against a real keyholed (this build's) under Protocol/testing/keyholed_harness.py: the
/// operations an app uses, and the restart tests of Protocol/testing/README.md.
@Suite("KeyholeClient against keyholed_harness.py", .serialized)
struct HarnessTests {
    /// Set once the harness's chaos is over.
    final class Flag: Sendable {
        private let value = Atomic<Bool>(false)
        var isSet: Bool { value.load(ordering: .acquiring) }
        func set() { value.store(true, ordering: .releasing) }
    }

    /// Waits for the harness's `{"chaos": ...}` line, then sets `done`.
    static func chaosEnd(_ harness: Harness, done: Flag) async -> JSONValue? {
        let line = await harness.next()
        done.set()
        return line
    }

    @Test("ping, token.verify, session create/get/list/revoke, user.get, session_not_found")
    func operations() async throws {
        let harness = try await Harness.start()
        let client = KeyholeClient(socketPath: harness.socket)
        #expect(try await client.ping().protocolVersion == 1)
        let verified = try await client.verifyToken(harness.token)
        #expect(verified["sub"]?.stringValue == harness.sub)
        #expect(verified["issuer"]?.stringValue == harness.issuer)

        let created = try await client.createSession(sub: harness.sub, issuer: harness.issuer, data: ["plan": "pro"])
        #expect(created.token.hasPrefix("kh_"))
        #expect(!"\(created)".contains(created.token), "a session's description never shows its token")
        let session = try await client.getSession(created.token)
        #expect(session["id"]?.stringValue == created.id)
        #expect(session["sub"]?.stringValue == harness.sub)
        #expect(session["data"] == ["plan": "pro"])
        #expect(session["user"]?["sub"]?.stringValue == harness.sub)
        let listed = try await client.listSessions(sub: harness.sub, issuer: harness.issuer)
        #expect(listed.map { $0["id"]?.stringValue } == [created.id])
        let user = try await client.getUser(sub: harness.sub, issuer: harness.issuer)
        #expect(user["issuer"]?.stringValue == harness.issuer)
        #expect(user["last_login_at"]?.intValue != nil)

        #expect(try await client.revokeSession(token: created.token))
        #expect(try await client.revokeSession(id: created.id) == false)
        do {
            _ = try await client.getSession(created.token)
            Issue.record("a revoked session was found")
        } catch let error as ProtocolError {
            #expect(error.code == .sessionNotFound)
        }
        await #expect(throws: ProtocolError(code: .userNotFound, message: "")) {
            try await client.getUser(sub: "nobody", issuer: harness.issuer)
        }
        try await client.close()
        let (status, stderr) = await harness.stop()
        #expect(status == 0, "\(stderr)")
    }

    @Test("reads across restarts and bounces (chaos 6 200): every session.get succeeds")
    func readsAcrossRestarts() async throws {
        let harness = try await Harness.start()
        let client = KeyholeClient(socketPath: harness.socket)
        let created = try await client.createSession(sub: "reader", issuer: harness.issuer)
        let done = Flag()
        #expect(await harness.command("chaos 6 200")?["ok"] == true)
        async let chaos = Self.chaosEnd(harness, done: done)
        var calls = 0
        var failures: [String] = []
        while !done.isSet {
            do {
                let session = try await client.getSession(created.token)
                #expect(session["id"]?.stringValue == created.id)
            } catch {
                failures.append("\(error)")
            }
            calls += 1
        }
        let outcome = await chaos
        #expect(outcome?["chaos"] == "done", "\(String(describing: outcome))")
        #expect(failures.isEmpty, "\(failures.count) of \(calls) session.get failed: \(failures.prefix(5))")
        #expect(calls >= 6, "calls during the chaos (at least one a cycle): \(calls)")
        try await client.close()
        let (status, stderr) = await harness.stop()
        #expect(status == 0, "\(stderr)")
    }

    @Test("creates across restarts and bounces (chaos 6 200): every one succeeds, each applied once (keyholed's goodbye)")
    func createsAcrossRestarts() async throws {
        let harness = try await Harness.start()
        let client = KeyholeClient(socketPath: harness.socket)
        let done = Flag()
        #expect(await harness.command("chaos 6 200")?["ok"] == true)
        async let chaos = Self.chaosEnd(harness, done: done)
        var created: [String: String] = [:]
        var failed: [String] = []
        var n = 0
        while !done.isSet {
            let sub = "restart-\(n)"
            n += 1
            do {
                created[sub] = try await client.createSession(sub: sub, issuer: harness.issuer).id
            } catch {
                failed.append("\(sub): \(error)")
            }
        }
        let outcome = await chaos
        #expect(outcome?["chaos"] == "done", "\(String(describing: outcome))")
        #expect(failed.isEmpty, "\(failed.count) of \(n) creates failed: \(failed.prefix(5))")
        #expect(created.count >= 6, "creates during the chaos (at least one a cycle): \(created.count)")
        for (sub, id) in created {
            let sessions = try await client.listSessions(sub: sub, issuer: harness.issuer)
            #expect(sessions.map { $0["id"]?.stringValue } == [id], "\(sub)")
        }
        try await client.close()
        let (status, stderr) = await harness.stop()
        #expect(status == 0, "\(stderr)")
    }
}
