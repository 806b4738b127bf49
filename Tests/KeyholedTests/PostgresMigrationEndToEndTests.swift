import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

extension PostgresEndToEndTests {
    /// `keyholed --migrate-to-postgres` (Sources/KeyholePostgres/POSTGRES.md, "From one host to
    /// several"): a local keyholed's store copied into PostgreSQL by keyholed processes, as an
    /// operator does it. Nested in the serialized PostgreSQL suite: one cluster at a time.
    @Suite("migration from the local store")
    struct MigrationTests {
        /// The fixed moment the local keyholed creates its sessions at.
        static let moment: Int64 = 1_800_000_000
        /// When the migration runs, and the switched keyholed serves: short sessions have expired.
        static let later = moment + 3600

        /// `keyholed --migrate-to-postgres` on `directory`'s `keyholed.toml` and `state` (or `state`),
        /// at `later`.
        static func migrate(_ directory: URL, state: String? = nil, arguments: [String] = []) async throws -> ChildProcess.Result {
            try await ChildProcess.runOffPool([
                DaemonProcess.binary.path, "--config", directory.appendingPathComponent("keyholed.toml").path,
                "--state-dir", state ?? directory.appendingPathComponent("state").path, "--migrate-to-postgres",
                "--enable-debug-ops", "--fixed-clock", "\(later)",
            ] + arguments)
        }

        /// The migration's counts for `kind` (`users`, `sessions`, `outbox`) from its summary.
        static func counts(_ result: ChildProcess.Result, _ kind: String) -> (copied: Int, present: Int)? {
            guard let line = result.stdout.split(separator: "\n").first(where: { $0.hasPrefix("  \(kind): ") }) else { return nil }
            let numbers = line.split(whereSeparator: { !$0.isNumber }).compactMap { Int($0) }
            guard numbers.count >= 2 else { return nil }
            return (numbers[0], numbers[1])
        }

        /// A dump of `cluster`'s rows and schema, without the `\restrict` and `\unrestrict` lines
        /// (pg_dump since 15.14 puts a key of its own in them, new on every dump).
        static func dump(_ cluster: PostgresCluster) async throws -> String {
            let text = try #require(try await cluster.command("dump")["out"]?.stringValue)
            return text.split(separator: "\n", omittingEmptySubsequences: false)
                .filter { !$0.hasPrefix("\\restrict ") && !$0.hasPrefix("\\unrestrict ") }.joined(separator: "\n")
        }

        /// The rows `query` (a `SELECT count(*) …`) counts.
        static func count(_ cluster: PostgresCluster, _ query: String) async throws -> Int? {
            Int(try await cluster.sql(query).trimmingCharacters(in: .whitespacesAndNewlines))
        }

        /// session.create for each of `arguments`, sent before any answer is read (their commits
        /// grouped): the tokens, in order.
        static func create(_ connection: RawConnection, _ arguments: [[String: JSONValue]]) throws -> [String] {
            var tokens: [String] = []
            for start in stride(from: 0, to: arguments.count, by: 200) {
                let chunk = arguments[start..<min(arguments.count, start + 200)]
                for (offset, args) in chunk.enumerated() {
                    let request: JSONValue = ["op": "session.create", "id": .int(Int64(offset)), "args": .object(args)]
                    try connection.sendFrame(request.jsonText)
                }
                var answers: [Int64: String] = [:]
                for _ in chunk {
                    let answer = try connection.readResponse()
                    guard let id = answer["id"]?.intValue, let token = answer["result"]?["session"]?.stringValue else {
                        throw RawConnection.Failure(description: "session.create failed: \(answer.jsonText)")
                    }
                    answers[id] = token
                }
                tokens += (0..<Int64(chunk.count)).map { answers[$0]! }
            }
            return tokens
        }

        /// A local keyholed on `directory` (its `state`) at `moment`, for `fill`; stopped after.
        static func local(_ directory: URL, _ fill: (RawConnection) throws -> Void) throws {
            let daemon = try DaemonProcess(
                config: "", arguments: ["--enable-debug-ops", "--fixed-clock", "\(moment)"], directory: directory)
            try daemon.waitUntilReady()
            try fill(try RawConnection(path: daemon.socketPath))
            #expect(try daemon.terminate() == 0)
        }

        /// Switches `directory`'s configuration to `cluster`, as the operator does before migrating.
        static func switchConfiguration(_ directory: URL, _ cluster: PostgresCluster, timeout: String = "5s") throws {
            try PostgresEndToEndTests.config(cluster, timeout: timeout)
                .write(to: directory.appendingPathComponent("keyholed.toml"), atomically: true, encoding: .utf8)
        }

        @Test("users and live sessions move: the same tokens work on PostgreSQL with the same answers, user records read the same, expired and revoked sessions stay behind; a second run copies and changes nothing; no token in a dump")
        func moves() async throws {
            let cluster = try await PostgresCluster.start()
            let directory = try DaemonProcess.makeDirectory()
            defer { try? FileManager.default.removeItem(at: directory) }
            var live: [String] = [], gone: [String] = []
            var sessionAnswers: [String: JSONValue] = [:], userAnswers: [String: JSONValue] = [:]
            // Two subjects Swift calls equal, told apart by their bytes in both stores.
            let subs = (0..<40).map { "user\($0)" } + ["Jos\u{E9}", "Jose\u{301}"]
            try Self.local(directory) { connection in
                live = try Self.create(connection, subs.enumerated().map { n, sub in
                    ["sub": .string(sub), "ttl_s": 2_592_000, "idle_s": 604_800, "data": ["n": .int(Int64(n))]]
                })
                live += try Self.create(connection, [["sub": "user1", "ttl_s": 2_592_000, "idle_s": 604_800]])
                for sub in subs.prefix(10) {
                    _ = try connection.result("user.update", ["sub": .string(sub), "email": .string("\(sub)@example.com"), "name": ["given": "Given"]])
                }
                gone = try Self.create(connection, [["sub": "user2", "ttl_s": 600], ["sub": "user3", "idle_s": 600]])
                let revoked = try Self.create(connection, [["sub": "user4"]])[0]
                #expect(try connection.result("session.revoke", ["session": .string(revoked)])["revoked"] == true)
                gone.append(revoked)
                _ = try connection.result("debug.advance_clock", ["s": .int(Self.later - Self.moment)])
                for token in live { sessionAnswers[token] = try connection.result("session.get", ["session": .string(token)]) }
                for token in gone { #expect(try connection.errorCode("session.get", ["session": .string(token)]) == "session_not_found") }
                for sub in subs { userAnswers[sub] = try connection.result("user.get", ["sub": .string(sub)]) }
            }
            try Self.switchConfiguration(directory, cluster)

            let first = try await Self.migrate(directory)
            #expect(first.status == 0, "\(first.stderr)")
            #expect(Self.counts(first, "users")! == (subs.count, 0), "\(first.stdout)")
            #expect(Self.counts(first, "sessions")! == (live.count, 0), "\(first.stdout)")
            #expect(first.stdout.contains("2 expired, not copied"), "\(first.stdout)")
            #expect(Self.counts(first, "outbox")! == (0, 0))
            let dumped = try await Self.dump(cluster)
            #expect(dumped.contains("COPY keyhole.sessions") && !dumped.contains("\\restrict "))
            let second = try await Self.migrate(directory)
            #expect(second.status == 0, "\(second.stderr)")
            #expect(Self.counts(second, "users")! == (0, subs.count) && Self.counts(second, "sessions")! == (0, live.count), "\(second.stdout)")
            #expect(try await Self.dump(cluster) == dumped, "a second run changed the database")

            // Neither printed nor logged, nor in the database: no token, nor any 16 characters of one.
            for token in live + gone {
                let random = String(token.dropFirst(3))
                for text in [first.stdout, first.stderr, second.stdout, second.stderr, dumped] {
                    #expect(!text.contains(random))
                    for start in stride(from: 0, to: random.count - 16, by: 8) {
                        #expect(!text.contains(random.dropFirst(start).prefix(16)), "a piece of a token")
                    }
                }
            }

            let shared = try DaemonProcess(
                config: PostgresEndToEndTests.config(cluster), arguments: ["--enable-debug-ops", "--fixed-clock", "\(Self.later)"],
                directory: directory)
            try shared.waitUntilReady()
            let connection = try RawConnection(path: shared.socketPath)
            for token in live {
                let answer = try connection.result("session.get", ["session": .string(token)])
                #expect(answer == sessionAnswers[token])
                #expect(answer["sub"]?.stringValue.map { Array($0.utf8) } == sessionAnswers[token]?["sub"]?.stringValue.map { Array($0.utf8) })
            }
            for token in gone { #expect(try connection.errorCode("session.get", ["session": .string(token)]) == "session_not_found") }
            for sub in subs { #expect(try connection.result("user.get", ["sub": .string(sub)]) == userAnswers[sub], "\(sub)") }
            #expect(try connection.result("session.list", ["sub": "user1"])["sessions"]?.arrayValue?.count == 2)
            #expect(try shared.terminate() == 0)
            #expect(await cluster.close() == 0)
        }

        @Test("interrupted: a run killed (kill -9) mid-way and a run the database refused mid-way leave whole batches; run again, it copies the rest; rows deleted from the database are copied again, rows changed there are left as they are")
        func resumes() async throws {
            let cluster = try await PostgresCluster.start()
            let directory = try DaemonProcess.makeDirectory()
            defer { try? FileManager.default.removeItem(at: directory) }
            var tokens: [String] = []
            try Self.local(directory) { connection in
                tokens = try Self.create(connection, (0..<3000).map { n in ["sub": .string("user\(n % 600)"), "ttl_s": 2_592_000, "idle_s": 604_800] })
            }
            try Self.switchConfiguration(directory, cluster)
            // The schema first, from an empty store (nothing to copy), so that a gate can be put on
            // the sessions table: once a batch of them is in, the next waits there until its backend
            // is terminated, and the migration cannot finish before the test kills it.
            let empty = directory.appendingPathComponent("empty").path
            try FileManager.default.createDirectory(atPath: empty, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            let nothing = try await Self.migrate(directory, state: empty)
            #expect(nothing.status == 0 && Self.counts(nothing, "users")! == (0, 0) && Self.counts(nothing, "sessions")! == (0, 0), "\(nothing.stdout)\(nothing.stderr)")
            func gate(_ action: String) async throws {
                try await cluster.sql("""
                    CREATE OR REPLACE FUNCTION public.gate() RETURNS trigger LANGUAGE plpgsql AS $$
                    BEGIN IF (SELECT count(*) FROM keyhole.sessions) >= 1000 THEN \(action); END IF; RETURN NEW; END $$
                    """)
            }
            let terminateWaiting = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE wait_event = 'PgSleep'"
            try await gate("PERFORM pg_sleep(600)")
            try await cluster.sql("CREATE TRIGGER gate BEFORE INSERT ON keyhole.sessions FOR EACH ROW EXECUTE FUNCTION public.gate()")

            let killed = try DaemonProcess(
                config: PostgresEndToEndTests.config(cluster), arguments: ["--migrate-to-postgres", "--enable-debug-ops", "--fixed-clock", "\(Self.later)"],
                directory: directory)
            try killed.waitForStderr(containing: "kind=sessions")
            killed.kill()
            #expect(try killed.waitForExit() == 137, "\(killed.stderr)")
            try await cluster.sql(terminateWaiting)
            #expect(try await Self.count(cluster, "SELECT count(*) FROM keyhole.sessions") == 1000)
            #expect(try await Self.count(cluster, "SELECT count(*) FROM keyhole.users") == 600)

            try await gate("RAISE EXCEPTION 'gate closed'")
            let refused = try await Self.migrate(directory)
            #expect(refused.status == 1 && refused.stderr.contains("run the migration again"), "\(refused.stderr)")
            #expect(try await Self.count(cluster, "SELECT count(*) FROM keyhole.sessions") == 1000)
            // A backend of the killed run may still have been on its way into the gate a moment ago.
            try await cluster.sql(terminateWaiting)
            try await cluster.sql("DROP TRIGGER gate ON keyhole.sessions")

            let again = try await Self.migrate(directory)
            #expect(again.status == 0, "\(again.stderr)")
            #expect(Self.counts(again, "users")! == (0, 600) && Self.counts(again, "sessions")! == (2000, 1000), "\(again.stdout)")
            #expect(try await Self.count(cluster, "SELECT count(*) FROM keyhole.sessions") == 3000)

            // Part gone from the database (as if never copied), one user changed there since.
            try await cluster.sql("DELETE FROM keyhole.sessions WHERE id IN (SELECT id FROM keyhole.sessions ORDER BY id LIMIT 700)")
            try await cluster.sql("DELETE FROM keyhole.users WHERE sub IN (SELECT sub FROM keyhole.users ORDER BY sub LIMIT 50)")
            try await cluster.sql("UPDATE keyhole.users SET fields = convert_to('{\"name\":\"changed\"}', 'UTF8'), revision = 42 WHERE sub = convert_to('user599', 'UTF8')")
            let rest = try await Self.migrate(directory)
            #expect(rest.status == 0, "\(rest.stderr)")
            #expect(Self.counts(rest, "users")! == (50, 550) && Self.counts(rest, "sessions")! == (700, 2300), "\(rest.stdout)")
            #expect(try await Self.count(cluster, "SELECT revision FROM keyhole.users WHERE sub = convert_to('user599', 'UTF8')") == 42)

            let shared = try DaemonProcess(
                config: PostgresEndToEndTests.config(cluster), arguments: ["--enable-debug-ops", "--fixed-clock", "\(Self.later)"],
                directory: directory)
            try shared.waitUntilReady()
            let connection = try RawConnection(path: shared.socketPath)
            for (n, token) in tokens.enumerated() where n % 7 == 0 {
                #expect(try connection.result("session.get", ["session": .string(token)])["sub"] == .string("user\(n % 600)"))
            }
            #expect(try connection.result("user.get", ["sub": "user599"])["name"] == "changed")
            #expect(try shared.terminate() == 0)
            #expect(await cluster.close() == 0)
        }

        @Test("refusals: keyholed running on the state directory (1, nothing done), PostgreSQL unreachable (1), no [postgres] or no state directory or with --repair (78)")
        func refusals() async throws {
            let cluster = try await PostgresCluster.start()
            let directory = try DaemonProcess.makeDirectory()
            defer { try? FileManager.default.removeItem(at: directory) }
            let running = try DaemonProcess(config: "", arguments: ["--enable-debug-ops", "--fixed-clock", "\(Self.moment)"], directory: directory)
            try running.waitUntilReady()
            let token = try #require(try RawConnection(path: running.socketPath).result("session.create", ["sub": "alice"])["session"]?.stringValue)
            try Self.switchConfiguration(directory, cluster)
            let locked = try await Self.migrate(directory)
            #expect(locked.status == 1 && locked.stderr.contains("stop keyholed"), "\(locked.stderr)")
            #expect(try await Self.count(cluster, "SELECT count(*) FROM pg_namespace WHERE nspname = 'keyhole'") == 0, "the schema was made")
            #expect(try RawConnection(path: running.socketPath).result("session.get", ["session": .string(token)])["sub"] == "alice")
            #expect(try running.terminate() == 0)

            try "".write(to: directory.appendingPathComponent("keyholed.toml"), atomically: true, encoding: .utf8)
            let noPostgres = try await Self.migrate(directory)
            #expect(noPostgres.status == 78 && noPostgres.stderr.contains("[postgres]"), "\(noPostgres.stderr)")
            try Self.switchConfiguration(directory, cluster)
            let repair = try await Self.migrate(directory, arguments: ["--repair"])
            #expect(repair.status == 78, "\(repair.stderr)")
            let missing = try await ChildProcess.runOffPool([
                DaemonProcess.binary.path, "--config", directory.appendingPathComponent("keyholed.toml").path,
                "--state-dir", directory.appendingPathComponent("nowhere").path, "--migrate-to-postgres",
            ])
            #expect(missing.status == 78 && missing.stderr.contains("no state directory"), "\(missing.stderr)")
            #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("nowhere").path))

            try await cluster.command("stop")
            try Self.switchConfiguration(directory, cluster, timeout: "1s")
            let unreachable = try await Self.migrate(directory)
            #expect(unreachable.status == 1 && unreachable.stderr.contains("PostgreSQL"), "\(unreachable.stderr)")
            #expect(await cluster.close() == 0)
        }
    }
}
