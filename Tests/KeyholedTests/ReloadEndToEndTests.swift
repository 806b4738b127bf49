import Foundation
import KeyholeProtocol
import NIOCore
import KeyholeTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Reloading keyholed's configuration while it serves: SIGHUP and `keyhole reload` (admin.reload),
/// with real tokens, a real key-set server and the test in systemd's place for notifications.
@Suite("reload, end to end", .serialized, .ownThreads)
struct ReloadEndToEndTests {
    static let keySet = "apple_jwks_panva-wellknown-20241001.json"
    static let audience = "dev.timc.siwa-demo.TILiOS"

    static func config(audiences: [String], extra: String = "") -> String {
        TokenEndToEndTests.config(keySet: keySet, audiences: audiences, extra: extra)
    }

    static func rewrite(_ daemon: DaemonProcess, _ text: String) throws {
        try text.write(to: daemon.directory.appendingPathComponent("keyholed.toml"), atomically: true, encoding: .utf8)
    }

    @Test("SIGHUP adds an audience while a connection stays open and keeps working; RELOADING=1 then READY=1; restart-only keys are named and kept")
    func sighupAddsAudience() throws {
        let (token, moment) = try KeySetEndToEndTests.token4()
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let notify = try DatagramSocket(path: directory.appendingPathComponent("notify").path)
        let daemon = try DaemonProcess(
            config: Self.config(audiences: ["com.example.other"]), arguments: ["--enable-debug-ops", "--fixed-clock", "\(moment)"],
            directory: directory, environment: ["NOTIFY_SOCKET": notify.path])
        _ = try #require(notify.receive(until: "READY=1"))
        try daemon.waitUntilReady()
        let connection = try RawConnection(path: daemon.socketPath)
        #expect(try connection.errorCode("token.verify", ["token": .string(token)]) == "token_audience_invalid")
        let before = try connection.result("session.create", ["sub": "u1"])

        try Self.rewrite(daemon, Self.config(
            audiences: ["com.example.other", Self.audience],
            extra: "\n[sessions]\nttl = \"1h\"\n\n[storage]\nfsync = \"batch\"\n"))
        daemon.signal(SIGHUP)
        let messages = try #require(notify.receive(until: "READY=1"))
        #expect(messages.contains { $0.hasPrefix("RELOADING=1\nMONOTONIC_USEC=") })
        try daemon.waitForStderr(containing: "config.reloaded")

        // The same connection: the token now verifies, sessions get the new default lifetime.
        let verified = try connection.result("token.verify", ["token": .string(token)])
        #expect(verified["issuer"] == "apple")
        #expect(verified["claims"]?["aud"]?.stringValue == Self.audience)
        let after = try connection.result("session.create", ["sub": "u1"])
        #expect(before["expires_at"]?.intValue == moment + 30 * 86_400)
        #expect(after["expires_at"]?.intValue == moment + 3600)
        #expect(daemon.stderr.contains("config.reload_needs_restart key=storage.fsync"))
        #expect(daemon.stderr.contains("trigger=SIGHUP"))
        #expect(daemon.stderr.contains("applied=sessions.ttl,issuer.apple"))

        // Still the same process, still serving.
        #expect(try connection.result("ping")["protocol"] == 1)
        daemon.signal(SIGTERM)
        #expect(try daemon.waitForExit() == 0)
    }
}

extension ReloadEndToEndTests {
    @Test("a reload's log level applies to requests on connections already open: each request's debug line from the next pass on, and none once the level is back at info")
    func reloadedLevelLogsRequests() throws {
        let level = { (level: String) in "[log]\nlevel = \"\(level)\"\n" }
        let daemon = try DaemonProcess(config: level("info"), logLevel: nil)
        try daemon.waitUntilReady()
        let connection = try RawConnection(path: daemon.socketPath)
        #expect(try connection.result("ping")["protocol"] == 1)

        try Self.rewrite(daemon, level("debug"))
        daemon.signal(SIGHUP)
        try daemon.waitForStderr(containing: "config.reloaded")
        // A request of its own kind, so that only a line logged after the reload can match.
        #expect(try connection.result("stats")["requests"] != nil)
        try daemon.waitForStderr(containing: "debug request op=stats")

        // The second reload also changes the sessions' lifetime, which only its line names.
        try Self.rewrite(daemon, level("info") + "\n[sessions]\nttl = \"2h\"\n")
        daemon.signal(SIGHUP)
        try daemon.waitForStderr(containing: "sessions.ttl")
        _ = try connection.errorCode("session.get", ["session": "nothing"])
        daemon.signal(SIGTERM)
        #expect(try daemon.waitForExit() == 0)
        // stderr is complete once keyholed exited. (A stale "logs" answer would not show below:
        // swift-log asks the level again before it writes. The first half is what tests the pass's
        // answer being asked again after a reload.)
        #expect(!daemon.stderr.contains("op=ping"))
        #expect(daemon.stderr.contains("debug request op=stats"))
        #expect(!daemon.stderr.contains("op=session.get"))
    }

    @Test("10 000 reloads grow keyholed's resident memory by less than 1 MiB: what the TOML parser hands back is freed",
        .disabled(if: DaemonProcess.onAnotherLoop, "what grew was the TOML parser's, which no loop touches; a minute of CPU the first pass spent"))
    func reloadsKeepMemory() async throws {
        // The file the package ships (its socket and state directory given on the command line):
        // before, TOMLKit leaked 9 KB each time it read it.
        let shipped = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("packaging/keyholed.toml")
        let daemon = try DaemonProcess(config: try String(contentsOf: shipped, encoding: .utf8))
        defer { try? FileManager.default.removeItem(at: daemon.directory) }
        try daemon.waitUntilReady()
        // A sanitizer's bookkeeping (ASan's quarantine, TSan's shadow) grows with every allocation, and
        // its reloads are slow: a few hundred then, to see them answered, and no bound.
        let sanitized = ProcessInfo.processInfo.environment["KEYHOLE_SANITIZER"] != nil
        let (socket, pid) = (daemon.socketPath, daemon.pid)
        // Thirteen thousand blocking round trips: on a thread of their own, not one of the few the
        // test process's tasks share (blocked for half a minute, it held other suites past their limits).
        let grown: Int = try await withCheckedThrowingContinuation { done in
            Thread {
                done.resume(with: Result {
                    let connection = try RawConnection(path: socket)
                    // Each reload answered before the next is asked: one after the other. The first ones
                    // grow what any process grows at first (the allocator's arenas; libdispatch's caches
                    // of continuations, which fill within a few thousand tasks, seen with heaptrack).
                    for _ in 0..<(sanitized ? 100 : 3000) { _ = try connection.result("admin.reload") }
                    let before = try Self.resident(pid)
                    for _ in 0..<(sanitized ? 300 : 10_000) { _ = try connection.result("admin.reload") }
                    return try Self.resident(pid) - before
                })
            }.start()
        }
        if !sanitized { #expect(grown < 1024, "\(grown) KiB over 10 000 reloads") }
        #expect(try daemon.terminate() == 0)
    }

    /// Process `pid`'s resident set, in KiB.
    static func resident(_ pid: pid_t) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        let field = status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") }?.split(separator: " ", omittingEmptySubsequences: true)
        guard let field, field.count > 1, let kib = Int(field[1]) else { throw CocoaError(.fileReadCorruptFile) }
        return kib
    }

    @Test("a SIGHUP sent the moment READY=1 arrives is a reload, every time (SIGHUP is trapped before keyholed says it is ready)")
    func sighupRightAfterReady() throws {
        for _ in 0..<5 {
            let directory = try DaemonProcess.makeDirectory()
            defer { try? FileManager.default.removeItem(at: directory) }
            let notify = try DatagramSocket(path: directory.appendingPathComponent("notify").path)
            let daemon = try DaemonProcess(
                config: Self.config(audiences: [Self.audience]), directory: directory, environment: ["NOTIFY_SOCKET": notify.path])
            _ = try #require(notify.receive(until: "READY=1"))
            daemon.signal(SIGHUP)
            let messages = try #require(notify.receive(until: "READY=1"), "the SIGHUP was lost")
            #expect(messages.contains { $0.hasPrefix("RELOADING=1\nMONOTONIC_USEC=") })
            daemon.signal(SIGTERM)
            #expect(try daemon.waitForExit() == 0)
        }
    }

    @Test("keyhole reload: a file that does not load changes nothing (exit 1, config_invalid naming the key); new limits hold for new connections only")
    func cliReload() throws {
        let (token, moment) = try KeySetEndToEndTests.token4()
        let cli = ChildProcess.builtProduct("keyhole").path
        let daemon = try DaemonProcess.start(
            config: Self.config(audiences: [Self.audience]), arguments: ["--enable-debug-ops", "--fixed-clock", "\(moment)"])
        let old = try RawConnection(path: daemon.socketPath)
        #expect(try old.result("token.verify", ["token": .string(token)])["issuer"] == "apple")

        // An unknown key, then an issuer whose key-set file is missing: both refused whole.
        for (broken, key) in [
            (Self.config(audiences: ["com.example.other"], extra: "\n[server]\nmax_frames = 1\n"), "max_frames"),
            (TokenEndToEndTests.config(keySet: "missing.json", audiences: ["com.example.other"]), "jwks_uri"),
        ] {
            try Self.rewrite(daemon, broken)
            let reload = try ChildProcess.run([cli, "reload", "--socket", daemon.socketPath])
            #expect(reload.status == 1)
            #expect(reload.stderr.contains("config_invalid"), "\(reload.stderr)")
            #expect(reload.stderr.contains(key), "\(reload.stderr)")
            // The audience the broken file drops still verifies: nothing of it was applied.
            #expect(try old.result("token.verify", ["token": .string(token)])["issuer"] == "apple")
        }
        #expect(daemon.stderr.contains("config.reload_failed"))

        // Frames of at most 256 bytes from now on: for new connections; the open one keeps 64 KiB.
        try Self.rewrite(daemon, Self.config(audiences: [Self.audience], extra: "\n[server]\nmax_frame_bytes = 256\n"))
        let reload = try ChildProcess.run([cli, "reload", "--socket", daemon.socketPath])
        #expect(reload.status == 0, "\(reload.stderr)")
        let outcome = try JSONValue.parse(ByteBuffer(string: reload.stdout))
        #expect(outcome["applied"] == ["server.max_frame_bytes"])
        #expect(outcome["needs_restart"] == [])
        #expect(token.utf8.count > 256)
        #expect(try old.result("token.verify", ["token": .string(token)])["issuer"] == "apple")
        let new = try RawConnection(path: daemon.socketPath)
        #expect(try new.errorCode("token.verify", ["token": .string(token)]) == "frame_too_large")

        // Arguments are refused, as for every admin operation.
        #expect(try old.errorCode("admin.reload", ["now": true]) == "bad_request")
        #expect(try daemon.terminate() == 0)
    }

    @Test("a remote issuer whose audiences change keeps its keys without a fetch; an issuer a reload adds is fetched at once")
    func remoteIssuers() async throws {
        let (token, moment) = try KeySetEndToEndTests.token4()
        let server = try await LocalHTTPServer(reply: try KeySetEndToEndTests.reply("panva-wellknown-20241001", maxAge: 3600))
        let other = try await LocalHTTPServer(reply: try KeySetEndToEndTests.reply("unresolved-ruby-2025", maxAge: 3600))
        func config(_ audiences: [String], second: Bool) -> String {
            var text = """
                [[issuer]]
                name = "apple"
                preset = "apple"
                jwks_uri = "\(server.url)/auth/keys"
                audiences = [\(audiences.map { "\"\($0)\"" }.joined(separator: ", "))]

                """
            if second {
                text += """
                    [[issuer]]
                    name = "second"
                    iss = "https://second.example"
                    jwks_uri = "\(other.url)/keys"
                    audiences = ["x"]

                    """
            }
            return text
        }
        let daemon = try DaemonProcess.start(config: config(["com.example.other"], second: false), arguments: ["--enable-debug-ops", "--fixed-clock", "\(moment)"])
        let connection = try RawConnection(path: daemon.socketPath)
        #expect(try connection.errorCode("token.verify", ["token": .string(token)]) == "token_audience_invalid")
        #expect(server.received.count == 1)

        try Self.rewrite(daemon, config([Self.audience], second: true))
        let outcome = try connection.result("admin.reload")
        #expect(outcome["applied"] == ["issuer.apple", "issuer.second"])
        #expect(try connection.result("token.verify", ["token": .string(token)])["issuer"] == "apple")
        #expect(server.received.count == 1)
        await other.waitForRequests(1)
        try daemon.waitForStderr(containing: "issuer.keys_fetched issuer=second")
        let status = try connection.result("jwks.status", ["issuer": "second"])
        #expect(status["issuers"]?[0]?["usable"] == true, "\(status)")

        // Removed again: its issuer is gone for requests.
        try Self.rewrite(daemon, config([Self.audience], second: false))
        #expect(try connection.result("admin.reload")["applied"] == ["issuer.second"])
        let gone = try connection.call("jwks.status", ["issuer": "second"])
        #expect(gone["error"]?["code"] == "bad_request")
        #expect(gone["error"]?["message"] == "no issuer named 'second' is configured", "\(gone.jsonText)")
        #expect(try daemon.terminate() == 0)
        try await server.close()
        try await other.close()
    }
}
