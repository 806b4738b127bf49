import ArgumentParser
import Foundation
import KeyholeApple
import KeyholeJOSE
import KeyholeServer
import KeyholeStore
import Logging

/// `keyhole-bench refresh-checks`: what a pass of the Apple refresh-token checks costs keyholed on a
/// store of many Apple users when none is due (issue 32: under 1 ms at 1 000 000 users).
///
/// A local store (fsync off: the figures are of the walk and the schedule, not of the disk) gets
/// `--users` users, each with a refresh-token grant checked at the start, so nothing falls due for a
/// day. Then, on one thread: a whole walk through the users, which every pass did before the schedule
/// (and which a pass still does when the schedule needs one, at most hourly when nothing is due),
/// and passes of the service's own code with nothing due. Prints one JSON line, medians of the rounds.
struct RefreshChecksCost: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "refresh-checks",
        abstract: "Time a refresh-check pass with nothing due over many Apple users (goal: under 1 ms at 1 000 000).")

    @Option(help: "Apple users in the store.")
    var users = 1_000_000

    @Option(help: "Rounds; medians are reported.")
    var rounds = 5

    @Option(help: "Passes with nothing due timed per round.")
    var passes = 10_000

    func run() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keyhole-bench-checks-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let start: Int64 = 1_800_000_000
        var storeConfiguration = Store.Configuration()
        storeConfiguration.durability = .off
        storeConfiguration.snapshotWALBytes = nil
        let store = try Store.open(stateDirectory: directory, configuration: storeConfiguration, repair: false, now: start).0
        let logger = Logger(label: "keyhole-bench")
        let committer = Task { await StoreCommitter(store: store, logger: logger).run() }
        defer { committer.cancel() }

        // Every user signed in at `start` with a grant: 48 bytes stand in for a sealed token (never opened).
        let made = ContinuousClock.now
        let sealed = [UInt8](repeating: 0x5a, count: 48)
        for n in 0..<users {
            let principal = Principal(issuer: "apple", sub: String(format: "%06d.%032x.%04d", n % 1_000_000, n, n % 10_000))
            _ = try store.updateUser(principal, now: start, completion: { _ in }) { user in
                AppleGrant(sealedToken: sealed, clientID: "com.example.web", checkedAt: start).store(in: &user)
            }
        }
        let filled = ContinuousClock.now - made

        let clock = TestClock(start: Double(start + 600))
        let http = AppleClient.makeHTTPClient()
        let secrets = ClientSecrets(configuration: .init(teamID: "TEAM123456", keyID: "KEY1234567"), key: SigningKey())
        let exchange = AppleOperations.Exchange(
            client: AppleClient(client: http, secrets: secrets), sealingKey: try SealingKey(bytes: [UInt8](repeating: 7, count: 32)))
        let checks = AppleRefreshChecks(
            issuer: "apple", store: store.awaited, exchange: exchange, now: { clock.now }, logger: Logger(label: "keyhole-bench"))

        var walks: [Double] = []
        var firstPasses: [Double] = []
        var emptyPasses: [Double] = []
        var pause = Duration.seconds(60)
        for _ in 0..<rounds {
            clock.advance(by: 1)
            // Before: every pass walked every user.
            let walkStart = ContinuousClock.now
            guard let due = await checks.dueUsers(at: Int64(clock.now)), due.isEmpty else {
                throw ValidationError("the walk found users due, or could not read the store")
            }
            walks.append(Self.milliseconds(ContinuousClock.now - walkStart))
            // Now: the first pass walks into the schedule; the passes after it read no user.
            var schedule = RefreshCheckSchedule(capacity: AppleRefreshChecks.Configuration().scheduleCapacity, rewalkAfter: 3600)
            let firstStart = ContinuousClock.now
            schedule = await checks.pass(schedule, pause: &pause, spacing: .milliseconds(1))
            firstPasses.append(Self.milliseconds(ContinuousClock.now - firstStart))
            let walked = checks.walkCount
            let passStart = ContinuousClock.now
            for _ in 0..<passes {
                clock.advance(by: 0.05)
                schedule = await checks.pass(schedule, pause: &pause, spacing: .milliseconds(1))
            }
            emptyPasses.append(Self.milliseconds(ContinuousClock.now - passStart) * 1e6 / Double(passes))
            guard checks.walkCount == walked, schedule.count == min(users, AppleRefreshChecks.Configuration().scheduleCapacity) else {
                throw ValidationError("a pass with nothing due walked the users, or the schedule lost entries")
            }
        }
        try await http.shutdown()
        print(
            #"{"users": \#(users), "fill_s": \#(Self.rounded(Self.milliseconds(filled) / 1000)), "#
                + #""walk_ms": \#(Self.rounded(Self.median(walks))), "first_pass_ms": \#(Self.rounded(Self.median(firstPasses))), "#
                + #""pass_with_nothing_due_ns": \#(Self.rounded(Self.median(emptyPasses))), "#
                + #""walk_ms_rounds": \#(walks.map(Self.rounded)), "pass_ns_rounds": \#(emptyPasses.map(Self.rounded))}"#)
    }

    static func milliseconds(_ duration: Duration) -> Double {
        let parts = duration.components
        return Double(parts.seconds) * 1000 + Double(parts.attoseconds) / 1e15
    }

    static func median(_ values: [Double]) -> Double { values.sorted()[values.count / 2] }

    static func rounded(_ value: Double) -> Double { (value * 100).rounded() / 100 }
}
