import Foundation
import KeyholeApple
import KeyholeJOSE
import KeyholeProtocol
import KeyholeTestSupport
import Logging
import Synchronization
import Testing
@testable import KeyholeServer
@testable import KeyholeStore

/// The refresh-token checks on a real store, against a fake Apple on loopback, with the wall clock
/// injected: when checks fall due, what each answer does, and the service checking in turn.
@Suite("Apple refresh-token checks", .serialized, .ownThreads)
struct AppleRefreshChecksTests {
    static let client = "com.example.web"
    static let http = AppleClient.makeHTTPClient()
    let t0: Int64 = 1_800_000_000

    /// A store in a temporary directory with its committer, a fake Apple, and the checks over them.
    final class Harness: Sendable {
        let apple: FakeApple
        let store: Store
        let directory: String
        let exchange: AppleOperations.Exchange
        let clock: ManualTime
        let finished: AsyncStream<Void>
        private let finish: AsyncStream<Void>.Continuation

        init(now: Int64) async throws {
            apple = try await FakeApple()
            directory = FileManager.default.temporaryDirectory.appendingPathComponent("kh-checks-\(UUID())").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            store = try Store.open(stateDirectory: directory, configuration: Store.Configuration(), repair: false, now: now).0
            (finished, finish) = AsyncStream<Void>.makeStream()
            let finish = self.finish
            store.startCommitter(logger: Logger(label: "test")) { finish.finish() }
            var configuration = AppleClient.Configuration()
            configuration.endpoint = apple.url
            let secrets = ClientSecrets(configuration: .init(teamID: apple.teamID, keyID: apple.keyID), key: apple.teamKey)
            exchange = AppleOperations.Exchange(
                client: AppleClient(client: AppleRefreshChecksTests.http, secrets: secrets, configuration: configuration),
                sealingKey: try SealingKey(bytes: (0..<32).map { _ in UInt8.random(in: 0...255) }))
            clock = ManualTime(Double(now))
        }

        func checks(
            _ onRevoked: AppleRefreshChecks.Configuration.OnRevoked = .revokeSessions, perMinute: Int = 60, exchange: AppleOperations.Exchange? = nil,
            scheduleCapacity: Int = 65_536
        ) -> AppleRefreshChecks {
            var configuration = AppleRefreshChecks.Configuration()
            configuration.onRevoked = onRevoked
            configuration.perMinute = perMinute
            configuration.scheduleCapacity = scheduleCapacity
            return AppleRefreshChecks(issuer: "apple", store: store.awaited, exchange: exchange ?? self.exchange, configuration: configuration, now: { [clock] in clock.now }, logger: Logger(label: "test"))
        }

        /// Signs `sub` in with a real code exchange at `time`: their sealed grant and `sessions` sessions.
        func signIn(_ sub: String, at time: Int64, sessions: Int = 2) async throws -> String {
            let principal = Principal(issuer: "apple", sub: sub)
            let code = apple.issueCode(sub: sub, clientID: AppleRefreshChecksTests.client)
            let tokens = try await exchange.client.exchangeCode(code, clientID: AppleRefreshChecksTests.client, redirectURI: nil)
            let refreshToken = try #require(tokens.refreshToken)
            let sealed = try #require(AppleGrant.seal(refreshToken, for: principal, with: exchange.sealingKey))
            _ = try await StoreCommit.awaiting { done throws(StoreError) in
                try store.updateUser(principal, now: time, completion: done) { user in
                    AppleGrant(sealedToken: sealed, clientID: AppleRefreshChecksTests.client, checkedAt: time).store(in: &user)
                }
            }
            for _ in 0..<sessions {
                _ = try await StoreCommit.awaiting { done throws(StoreError) in
                    try store.createSession(for: principal, now: time, ttl: 30 * 86_400, idle: 30 * 86_400, data: nil, completion: done)
                }
            }
            return refreshToken
        }

        func grant(_ sub: String) -> AppleGrant? { store.user(Principal(issuer: "apple", sub: sub)).flatMap(AppleGrant.init) }

        func sessions(_ sub: String) -> Int { store.sessions(of: Principal(issuer: "apple", sub: sub), now: Int64(clock.now)).count }

        func close() async throws {
            store.stop()
            for await _ in finished {}
            store.lock.release()
            try? FileManager.default.removeItem(atPath: directory)
            try await apple.close()
        }
    }

    @Test("a check falls due a day after the last, spread by less than an eighth of a day per user, most overdue first; users without a token never")
    func due() async throws {
        let harness = try await Harness(now: t0)
        let checks = harness.checks()
        let subs = (0..<6).map { "001.due.\($0)" }
        for (n, sub) in subs.enumerated() { _ = try await harness.signIn(sub, at: t0 + Int64(n), sessions: 0) }
        _ = try await StoreCommit.awaiting { done throws(StoreError) in
            try harness.store.updateUser(Principal(issuer: "apple", sub: "001.plain"), now: t0, completion: done) { $0.fields["email"] = "p@example.com" }
        }
        #expect(await checks.dueNow(at: t0 + 86_399).isEmpty)
        let all = await checks.dueNow(at: t0 + 86_400 + 10_800 + 10)
        #expect(Set(all.map(\.sub)) == Set(subs))
        let dues = all.map { principal in checks.due(principal, checkedAt: harness.grant(principal.sub)!.checkedAt) }
        #expect(dues == dues.sorted())
        for (principal, due) in zip(all, dues) {
            let checked = harness.grant(principal.sub)!.checkedAt
            #expect(due >= checked + 86_400 && due < checked + 86_400 + 10_800)
        }
        #expect(Set(dues.map { $0 - t0 }).count > 1, "spread")
        // Stable across restarts (not Hasher's per-process seed): FNV-1a of "a" is the published
        // 0xaf63dc4c8601ec8c.
        #expect(checks.due(Principal(issuer: "apple", sub: "a"), checkedAt: 0) == 86_400 + Int64(0xaf63_dc4c_8601_ec8c % UInt64(10_800)))
        try await harness.close()
    }

    @Test("a valid token: Apple asked under the token's client, the check recorded, not due again for a day")
    func valid() async throws {
        let harness = try await Harness(now: t0)
        let checks = harness.checks()
        let refreshToken = try await harness.signIn("001.valid", at: t0)
        let later = t0 + 2 * 86_400
        harness.clock.now = Double(later)
        #expect(await checks.dueNow(at: later).map(\.sub) == ["001.valid"])
        #expect(await checks.check(Principal(issuer: "apple", sub: "001.valid")) == .valid)
        let request = try #require(harness.apple.tokenRequests.last)
        #expect(request["grant_type"] == "refresh_token")
        #expect(request["refresh_token"] == refreshToken)
        #expect(request["client_id"] == Self.client)
        #expect(harness.grant("001.valid")?.checkedAt == later)
        #expect(harness.sessions("001.valid") == 2)
        #expect(await checks.dueNow(at: later + 86_399).isEmpty)
        #expect(checks.statistics["done"] == 1)
        try await harness.close()
    }

    @Test("consent withdrawn: the token is dropped and the sessions revoked, or with flag kept", arguments: [
        AppleRefreshChecks.Configuration.OnRevoked.revokeSessions, .flag,
    ])
    func consentWithdrawn(policy: AppleRefreshChecks.Configuration.OnRevoked) async throws {
        let harness = try await Harness(now: t0)
        let checks = harness.checks(policy)
        _ = try await harness.signIn("001.gone", at: t0)
        _ = try await harness.signIn("001.stays", at: t0)
        harness.apple.withdrawConsent(sub: "001.gone")
        let later = t0 + 2 * 86_400
        harness.clock.now = Double(later)
        let outcome = await checks.check(Principal(issuer: "apple", sub: "001.gone"))
        #expect(outcome == .consentRevoked(sessions: policy == .revokeSessions ? 2 : 0))
        #expect(harness.sessions("001.gone") == (policy == .revokeSessions ? 0 : 2))
        #expect(harness.grant("001.gone") == nil)
        let user = try #require(harness.store.user(Principal(issuer: "apple", sub: "001.gone")))
        #expect(user.publicJSON["consent_revoked_at"] == .int(later))
        #expect(user.fields["ext"]?["apple"]?["refresh_token"] == nil)
        #expect(await checks.dueNow(at: later).map(\.sub) == ["001.stays"])
        #expect(await checks.check(Principal(issuer: "apple", sub: "001.gone")) == .noToken)
        #expect(await checks.check(Principal(issuer: "apple", sub: "001.stays")) == .valid)
        #expect(harness.sessions("001.stays") == 2)
        #expect(checks.statistics["consent_revoked"] == 1)
        try await harness.close()
    }

    @Test("Apple down or refusing keyholed: nothing is revoked or recorded, and the check stays due")
    func failures() async throws {
        let harness = try await Harness(now: t0)
        let checks = harness.checks()
        _ = try await harness.signIn("001.wait", at: t0)
        let later = t0 + 2 * 86_400
        harness.clock.now = Double(later)
        harness.apple.fail(with: .serviceUnavailable)
        guard case .failed(let error) = await checks.check(Principal(issuer: "apple", sub: "001.wait")) else {
            Issue.record("not a failure")
            return
        }
        #expect(!error.isRejected)
        harness.apple.recover()
        // Client secrets signed with a key Apple does not know: invalid_client.
        var configuration = AppleClient.Configuration()
        configuration.endpoint = harness.apple.url
        let wrongKey = AppleOperations.Exchange(
            client: AppleClient(
                client: Self.http, secrets: ClientSecrets(configuration: .init(teamID: harness.apple.teamID, keyID: harness.apple.keyID), key: SigningKey()),
                configuration: configuration),
            sealingKey: harness.exchange.sealingKey)
        guard case .failed(let refused) = await harness.checks(exchange: wrongKey).check(Principal(issuer: "apple", sub: "001.wait")) else {
            Issue.record("not a failure")
            return
        }
        #expect(refused.isRejected && !refused.isInvalidGrant)
        #expect(harness.sessions("001.wait") == 2)
        #expect(harness.grant("001.wait")?.checkedAt == t0)
        #expect(await checks.dueNow(at: later).map(\.sub) == ["001.wait"])
        #expect(checks.statistics["failures"] == 1)
        try await harness.close()
    }

    @Test("two hosts walking the same users: the one whose claim is written checks, the other skips; a failed check's claim holds for its window either side of the other host's clock")
    func claimedByOne() async throws {
        let harness = try await Harness(now: t0)
        let hostA = harness.checks(), hostB = harness.checks()
        _ = try await harness.signIn("001.claim", at: t0)
        let later = t0 + 2 * 86_400
        harness.clock.now = Double(later)
        let principal = Principal(issuer: "apple", sub: "001.claim")
        let before = harness.apple.tokenRequests.count
        #expect(await hostA.check(principal, claiming: true) == .valid)
        #expect(await hostB.check(principal, claiming: true) == .skipped, "checked: no longer due")
        #expect(harness.apple.tokenRequests.count == before + 1)
        let user = try #require(harness.store.user(principal))
        #expect(AppleGrant.checkClaimedAt(user) == nil, "the result cleared the claim")

        // Due again; A claims and fails (Apple down): B leaves it alone while the claim is young,
        // whether B's clock is behind A's or ahead of it.
        let again = later + 2 * 86_400
        harness.clock.now = Double(again)
        harness.apple.fail(with: .serviceUnavailable)
        guard case .failed = await hostA.check(principal, claiming: true) else {
            Issue.record("not a failure")
            return
        }
        harness.apple.recover()
        for offset in [-100, 60, 899] {
            harness.clock.now = Double(again + Int64(offset))
            #expect(await hostB.check(principal, claiming: true) == .skipped, "claimed by A \(offset) s from B's clock")
        }
        #expect(harness.apple.tokenRequests.count == before + 2)
        harness.clock.now = Double(again + 901)
        #expect(await hostB.check(principal, claiming: true) == .valid, "A's claim is old: A may have died")
        // Not claiming (apple.refresh_check), a check is made at once.
        #expect(await hostA.check(principal) == .valid)
        try await harness.close()
    }

    @Test("the service checks every due user in turn, most overdue first, and stops when cancelled")
    func service() async throws {
        let harness = try await Harness(now: t0)
        let checks = harness.checks(perMinute: 600)
        var tokens: [String] = []
        for (n, sub) in ["001.s.a", "001.s.b", "001.s.c"].enumerated() {
            tokens.append(try await harness.signIn(sub, at: t0 + Int64(n) * 20_000, sessions: 0))
        }
        harness.apple.withdrawConsent(sub: "001.s.b")
        let later = t0 + 3 * 86_400
        harness.clock.now = Double(later)
        let requests = harness.apple.requestCount
        let forms = harness.apple.tokenRequests.count
        let running = Task { await checks.run() }
        await harness.apple.waitForRequests(requests + 3)
        running.cancel()
        await running.value
        #expect(harness.apple.requestPaths.dropFirst(requests) == ["/auth/token", "/auth/token", "/auth/token"])
        // In due order, which here is the order of the sign-ins, one request per user; the first two
        // checks were done before the third was sent (its form may not be recorded yet).
        let asked = harness.apple.tokenRequests.dropFirst(forms)
        #expect(asked.prefix(2).map { $0["refresh_token"] } == Array(tokens.prefix(2)))
        #expect(asked.allSatisfy { $0["grant_type"] == "refresh_token" })
        #expect(harness.grant("001.s.a")?.checkedAt == later)
        #expect(harness.grant("001.s.b") == nil)
        try await harness.close()
    }
}

extension AppleRefreshChecksTests {
    @Test("passes walk the users only when the schedule needs it: past its capacity the next pass walks again; with nothing due a pass reads no user; a sign-in after a walk is found by the next one, before it falls due")
    func scheduledPasses() async throws {
        let harness = try await Harness(now: t0)
        let checks = harness.checks(scheduleCapacity: 2)
        for (n, sub) in ["001.p.a", "001.p.b", "001.p.c"].enumerated() {
            _ = try await harness.signIn(sub, at: t0 + Int64(n), sessions: 0)
        }
        var schedule = RefreshCheckSchedule(capacity: 2, rewalkAfter: 3600)
        var pause = Duration.seconds(60)
        let t1 = t0 + 2 * 86_400
        harness.clock.now = Double(t1)
        let requests = harness.apple.requestCount
        // The first pass walks and checks the two it kept; the third was left out, so the horizon is
        // already past and the second pass walks again and checks it.
        schedule = await checks.pass(schedule, pause: &pause, spacing: .milliseconds(1))
        #expect(checks.walkCount == 1)
        #expect(harness.apple.requestCount == requests + 2)
        schedule = await checks.pass(schedule, pause: &pause, spacing: .milliseconds(1))
        #expect(checks.walkCount == 2)
        #expect(harness.apple.requestCount == requests + 3)
        #expect(["001.p.a", "001.p.b", "001.p.c"].allSatisfy { harness.grant($0)?.checkedAt == t1 })

        // Nothing due: passes within the horizon neither walk nor ask Apple.
        for step in 1...5 {
            harness.clock.now = Double(t1 + Int64(step) * 600)
            schedule = await checks.pass(schedule, pause: &pause, spacing: .milliseconds(1))
        }
        #expect(checks.walkCount == 2)
        #expect(harness.apple.requestCount == requests + 3)

        // A sign-in now is due a day later; the walk at the horizon (an hour after the last) has it.
        _ = try await harness.signIn("001.p.d", at: t1 + 3000, sessions: 0)
        let signedIn = harness.apple.requestCount
        harness.clock.now = Double(t1 + 3600)
        schedule = await checks.pass(schedule, pause: &pause, spacing: .milliseconds(1))
        #expect(checks.walkCount == 3)
        #expect(schedule.horizon == t1 + 7200)
        #expect(harness.apple.requestCount == signedIn)
        // A day and an eighth later all four are due; two at a time (the capacity), walking between.
        let t2 = t1 + 3000 + 86_400 + 86_400 / 8
        harness.clock.now = Double(t2)
        for _ in 1...3 where harness.grant("001.p.d")?.checkedAt != t2 {
            schedule = await checks.pass(schedule, pause: &pause, spacing: .milliseconds(1))
        }
        #expect(harness.grant("001.p.d")?.checkedAt == t2)
        #expect(checks.walkCount == 5)
        try await harness.close()
    }
}

extension AppleRefreshChecksTests {
    @Test("a check Apple could not answer goes back into the schedule and is tried again once this host's claim on it is over, not dropped")
    func failedCheckPutBack() async throws {
        let harness = try await Harness(now: t0)
        let checks = harness.checks()
        _ = try await harness.signIn("001.f.a", at: t0, sessions: 0)
        var schedule = RefreshCheckSchedule(capacity: 16, rewalkAfter: 3600)
        var pause = Duration.seconds(60)
        let t1 = t0 + 2 * 86_400
        harness.clock.now = Double(t1)
        harness.apple.fail(with: .serviceUnavailable, count: 1)
        let requests = harness.apple.requestCount
        schedule = await checks.pass(schedule, pause: &pause, spacing: .milliseconds(1))
        #expect(harness.apple.requestCount == requests + 1)
        #expect(pause == .seconds(900))
        #expect(schedule.count == 1)
        #expect(harness.grant("001.f.a")?.checkedAt == t0)
        // Within the claim's window: not tried (the claim would stop it), and not lost either.
        harness.clock.now = Double(t1 + 60)
        schedule = await checks.pass(schedule, pause: &pause, spacing: .milliseconds(1))
        #expect(harness.apple.requestCount == requests + 1)
        #expect(schedule.count == 1)
        harness.clock.now = Double(t1 + 900)
        schedule = await checks.pass(schedule, pause: &pause, spacing: .milliseconds(1))
        #expect(harness.apple.requestCount == requests + 2)
        #expect(harness.grant("001.f.a")?.checkedAt == t1 + 900)
        #expect(schedule.count == 0)
        #expect(checks.walkCount == 1)
        try await harness.close()
    }
}

/// A wall clock the test sets.
final class ManualTime: Sendable {
    private let value: Mutex<Double>

    init(_ now: Double) { value = Mutex(now) }

    var now: Double {
        get { value.withLock { $0 } }
        set { value.withLock { $0 = newValue } }
    }
}

extension AppleRefreshChecks {
    /// `dueUsers(at:)`, which must be able to read the store.
    func dueNow(at time: Int64) async -> [Principal] {
        let due = await dueUsers(at: time)
        #expect(due != nil, "the store could not be read")
        return due ?? []
    }
}
