import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// keyholed with `[storage] backend = "postgres"` (Sources/KeyholePostgres/POSTGRES.md): processes
/// sharing one real PostgreSQL, as hosts behind a load balancer do.
@Suite("PostgreSQL backend, end to end", .serialized, .ownThreads)
struct PostgresEndToEndTests {
    /// The `[storage]` and `[postgres]` sections for `cluster`, over its Unix socket.
    /// Bounds long enough for a loaded machine (the whole suite at once on two cores), except where
    /// a test is about them.
    static func config(_ cluster: PostgresCluster, timeout: String = "5s", staleness: String = "3s", extra: String = "") -> String {
        """
        [storage]
        backend = "postgres"

        [postgres]
        url = "\(cluster.socketDirectory)"
        port = \(cluster.port)
        user = "\(cluster.user)"
        timeout = "\(timeout)"
        max_staleness = "\(staleness)"
        \(extra)
        """
    }

    /// A keyholed on `cluster`, ready, with an HTTP socket at `<dir>/h.sock`.
    static func start(_ cluster: PostgresCluster, timeout: String = "5s", staleness: String = "3s") throws -> (DaemonProcess, RawConnection, String) {
        let directory = try DaemonProcess.makeDirectory()
        let http = directory.appendingPathComponent("h.sock").path
        let config = config(cluster, timeout: timeout, staleness: staleness) + "\n[http]\nsocket = \"\(http)\"\n"
        let daemon = try DaemonProcess(config: config, directory: directory)
        try daemon.waitUntilReady()
        return (daemon, try RawConnection(path: daemon.socketPath), http)
    }

    static func authz(_ path: String, _ token: String) throws -> Int {
        try HTTPExchange(try RawConnection(path: path)).request("GET", "/authz", headers: ["Cookie": "kh_session=\(token)"]).status
    }

    @Test("two keyholed on one database: created on A, read on B; revoked, revoked_all or deleted on A, refused by B (and /authz) within max_staleness")
    func twoHosts() async throws {
        let cluster = try await PostgresCluster.start()
        let (a, connectionA, _) = try Self.start(cluster)
        let (b, connectionB, httpB) = try Self.start(cluster)
        for change in ["session.revoke", "session.revoke_all", "user.delete"] {
            let created = try connectionA.result("session.create", ["sub": "alice", "data": ["role": "admin"]])
            let token = try #require(created["session"]?.stringValue)
            let read = try connectionB.result("session.get", ["session": .string(token)])
            #expect(read["sub"] == "alice" && read["id"] == created["id"] && read["data"] == ["role": "admin"])
            #expect(read["user"]?["sub"] == "alice")
            #expect(try Self.authz(httpB, token) == 200)
            let args: [String: JSONValue] = change == "session.revoke" ? ["session": .string(token)] : ["sub": "alice"]
            _ = try connectionA.result(change, args)
            let revokedAt = ContinuousClock.now
            var refused = false
            while !refused, ContinuousClock.now - revokedAt < .seconds(5) {
                refused = try connectionB.errorCode("session.get", ["session": .string(token)]) == "session_not_found"
            }
            let took = ContinuousClock.now - revokedAt
            #expect(refused && took < .seconds(3), "\(change): B refused it after \(took) (max_staleness 3 s)")
            #expect(try Self.authz(httpB, token) == 401)
        }
        // What this backend does not do, it says (snapshots); without [apple], Apple's operations say so.
        #expect(try connectionA.errorCode("apple.authorize") == "not_configured")
        #expect(try connectionA.errorCode("admin.snapshot") == "not_configured")
        // B's cache in use: fresh, or fresh again soon. On a loaded machine a heartbeat can be late
        // enough for the listener to be reconnecting (its cache dropped) just now.
        var stats: JSONValue?
        _ = try await PeerLimitsEndToEndTests.eventually {
            stats = try connectionB.result("stats")["store"]
            return stats?["cache_fresh"] == true
        }
        #expect(stats?["backend"] == "postgres" && stats?["cache_fresh"] == true, "\(String(describing: stats))")
        #expect(try a.terminate() == 0)
        #expect(try b.terminate() == 0)
        #expect(await cluster.close() == 0)
    }

    @Test("answers as the local store's: session.create, get, list and user.get have the same members")
    func sameAnswers() async throws {
        let cluster = try await PostgresCluster.start()
        let (shared, sharedConnection, _) = try Self.start(cluster)
        let local = try DaemonProcess.start(arguments: [])
        let localConnection = try RawConnection(path: local.socketPath)
        func shapes(_ connection: RawConnection) throws -> [String] {
            let created = try connection.result("session.create", ["sub": "bob", "ttl_s": 3600, "data": ["k": "v"]])
            _ = try connection.result("user.update", ["sub": "bob", "email": "bob@example.com", "name": ["given": "Bob"]])
            let got = try connection.result("session.get", ["session": created["session"]!])
            let list = try connection.result("session.list", ["sub": "bob"])
            let user = try connection.result("user.get", ["sub": "bob"])
            func keys(_ value: JSONValue?) -> String { (value?.objectValue?.keys.sorted() ?? []).joined(separator: ",") }
            return [keys(created), keys(got), keys(got["user"]), keys(list), keys(list["sessions"]?.arrayValue?.first), keys(user),
                    got["data"] == ["k": "v"] ? "data" : "no data", got["idle_timeout_s"] == 3600 ? "idle" : "no idle"]
        }
        #expect(try shapes(sharedConnection) == shapes(localConnection))
        #expect(try sharedConnection.errorCode("session.get", ["session": "kh_nope"]) == localConnection.errorCode("session.get", ["session": "kh_nope"]))
        #expect(try sharedConnection.errorCode("user.get", ["sub": "nobody"]) == "user_not_found")
        #expect(try shared.terminate() == 0)
        #expect(try local.terminate() == 0)
        #expect(await cluster.close() == 0)
    }

    @Test("kill -9 of a keyholed under load: every session it acknowledged is there for the other")
    func killed() async throws {
        let cluster = try await PostgresCluster.start()
        let (a, _, _) = try Self.start(cluster)
        let (b, connectionB, _) = try Self.start(cluster)
        let acknowledged = Mutex<[String]>([])
        let path = a.socketPath
        let writers = (0..<4).map { _ in
            Thread {
                guard let connection = try? RawConnection(path: path) else { return }
                while let created = try? connection.result("session.create", ["sub": "load"]), let token = created["session"]?.stringValue {
                    acknowledged.withLock { $0.append(token) }
                }
            }
        }
        writers.forEach { $0.start() }
        while acknowledged.withLock({ $0.count }) < 200 { try await Task.sleep(for: .milliseconds(5)) }
        a.kill()
        _ = try a.waitForExit()
        let tokens = acknowledged.withLock { $0 }
        for token in tokens {
            #expect(try connectionB.result("session.get", ["session": .string(token)])["sub"] == "load")
        }
        #expect(tokens.count >= 200)
        #expect(try b.terminate() == 0)
        #expect(await cluster.close() == 0)
    }

    @Test("PostgreSQL down (crashed) while keyholed runs: answers storage_unavailable within the timeout, then recovers without a restart")
    func databaseDown() async throws {
        let cluster = try await PostgresCluster.start()
        let (daemon, connection, httpPath) = try Self.start(cluster, timeout: "1s", staleness: "1s")
        let token = try #require(try connection.result("session.create", ["sub": "carol"])["session"]?.stringValue)
        try await cluster.command("crash")
        let crashed = ContinuousClock.now
        var refusal: JSONValue?
        // Served from the cache until max_staleness (1 s), then refused; each answer within the
        // timeout (1 s) plus slack: never a hang. Polled every 5 ms, for at most 10 s.
        while refusal == nil, ContinuousClock.now - crashed < .seconds(10) {
            let started = ContinuousClock.now
            let answer = try connection.call("session.get", ["session": .string(token)])
            let took = ContinuousClock.now - started
            #expect(took < .seconds(5), "answered after \(took) (timeout 1 s)")
            if answer["ok"] == false { refusal = answer } else { try await Task.sleep(for: .milliseconds(5)) }
        }
        #expect(refusal?["error"]?["code"] == "storage_unavailable", "\(String(describing: refusal))")
        #expect(refusal?["error"]?["retry_after_ms"]?.intValue != nil)
        #expect(ContinuousClock.now - crashed < .seconds(8), "cached reads went on past max_staleness (1 s) and a timeout (1 s)")
        #expect(try connection.errorCode("session.create", ["sub": "carol"]) == "storage_unavailable")
        #expect(try HTTPExchange(try RawConnection(path: httpPath)).request("GET", "/healthz").status == 503)
        try await cluster.command("start")
        var back = false
        for _ in 0..<1000 where !back {
            back = (try? connection.result("session.get", ["session": .string(token)]))?["sub"] == "carol"
            if !back { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(back, "keyholed did not recover by itself")
        #expect(try connection.result("session.create", ["sub": "carol"])["session"] != nil)
        #expect(try daemon.terminate() == 0)
        #expect(await cluster.close() == 0)
    }

    @Test("PostgreSQL restarted in immediate mode, then stopped and started, under load: every call answered within the timeout, nothing acknowledged lost, no keyholed restart")
    func restartedUnderLoad() async throws {
        let cluster = try await PostgresCluster.start()
        let (daemon, _, _) = try Self.start(cluster, timeout: "1s", staleness: "1s")
        let acknowledged = Mutex<[String]>([])
        let refused = Mutex(0)
        // What no writer may see: a lost connection, or a refusal other than storage_unavailable.
        let wrong = Mutex<[String]>([])
        let slowest = Mutex(Duration.zero)
        let running = Atomic(true)
        let path = daemon.socketPath
        let writers = (0..<4).map { _ in
            Thread {
                guard let connection = try? RawConnection(path: path) else { return wrong.withLock { $0.append("no connection") } }
                while running.load(ordering: .relaxed) {
                    let started = ContinuousClock.now
                    guard let answer = try? connection.call("session.create", ["sub": "load"]) else {
                        return wrong.withLock { $0.append("the connection failed") }
                    }
                    let took = ContinuousClock.now - started
                    slowest.withLock { $0 = max($0, took) }
                    if let token = answer["result"]?["session"]?.stringValue {
                        acknowledged.withLock { $0.append(token) }
                    } else if answer["error"]?["code"] == "storage_unavailable" {
                        refused.withLock { $0 += 1 }
                    } else {
                        wrong.withLock { $0.append("\(answer)") }
                    }
                }
            }
        }
        writers.forEach { $0.start() }
        func waitForMore(_ count: Int) async throws -> Bool {
            let target = acknowledged.withLock { $0.count } + count
            let start = ContinuousClock.now
            while acknowledged.withLock({ $0.count }) < target {
                guard ContinuousClock.now - start < .seconds(30) else { return false }
                try await Task.sleep(for: .milliseconds(5))
            }
            return true
        }
        #expect(try await waitForMore(100))
        for command in ["crash", "stop"] {
            try await cluster.command(command)
            let refusedBefore = refused.withLock { $0 }
            // Refusals while it is down: the writers keep going, each answered within the timeout.
            let down = ContinuousClock.now
            while refused.withLock({ $0 }) < refusedBefore + 8, ContinuousClock.now - down < .seconds(30) {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(refused.withLock { $0 } >= refusedBefore + 8, "no storage_unavailable after PostgreSQL's \(command)")
            try await cluster.command("start")
            #expect(try await waitForMore(100), "no sessions created after PostgreSQL's \(command) and start")
        }
        running.store(false, ordering: .relaxed)
        let stopping = ContinuousClock.now
        while writers.contains(where: { !$0.isFinished }), ContinuousClock.now - stopping < .seconds(30) {
            try await Task.sleep(for: .milliseconds(5))
        }
        let finished = writers.allSatisfy(\.isFinished)
        #expect(finished, "a writer still waits for an answer")
        let took = slowest.withLock { $0 }
        print("restartedUnderLoad: slowest answer \(took), \(acknowledged.withLock { $0.count }) acknowledged, \(refused.withLock { $0 }) refused")
        // The timeout (1 s) bounds each database call; the slack is for a loaded machine.
        #expect(took < .seconds(3), "an answer took \(took) (timeout 1 s)")
        #expect(wrong.withLock { $0 }.isEmpty, "\(wrong.withLock { $0 })")
        // Read by a host started after: nothing it could have cached, every row from the database.
        let (reader, connection, _) = try Self.start(cluster)
        let tokens = acknowledged.withLock { $0 }
        var missing = 0
        for token in tokens where (try? connection.result("session.get", ["session": .string(token)]))?["sub"] != "load" { missing += 1 }
        #expect(missing == 0, "\(missing) of \(tokens.count) acknowledged sessions lost")
        #expect(try reader.terminate() == 0)
        #expect(try daemon.terminate() == 0)
        #expect(await cluster.close() == 0)
    }

    @Test("at start: a schema from a newer keyholed is exit 78; PostgreSQL unreachable is exit 1 within the timeout")
    func startRefusals() async throws {
        let cluster = try await PostgresCluster.start()
        let (first, _, _) = try Self.start(cluster)
        #expect(try first.terminate() == 0)
        try await cluster.sql("INSERT INTO keyhole.schema_migrations VALUES (99, 0, 'the future')")
        let newer = try DaemonProcess(config: Self.config(cluster, timeout: "1s"))
        #expect(try newer.waitForExit() == 78)
        #expect(newer.stderr.contains("version 99"))
        try await cluster.command("stop")
        let started = ContinuousClock.now
        let unreachable = try DaemonProcess(config: Self.config(cluster, timeout: "1s"))
        #expect(try unreachable.waitForExit() == 1)
        #expect(ContinuousClock.now - started < .seconds(20), "ten times the 1 s timeout, and slack")
        #expect(await cluster.close() == 0)
    }
}
