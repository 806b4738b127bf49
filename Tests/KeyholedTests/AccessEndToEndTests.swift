import Foundation
import KeyholeTestSupport
import Testing

/// keyholed as a child process, asked by `keyhole call` running as other users (setpriv): the
/// kernel's peer credentials decide, per the default policy and per `[[access]]` rules.
@Suite("access by peer credentials, end to end", .serialized, .ownThreads)
struct AccessEndToEndTests {
    static let keyhole = ChildProcess.builtProduct("keyhole").path
    /// www-data (uid 33), with no supplementary groups. Not nobody: uid 65534 is the overflow uid,
    /// which keyholed treats as unknown whatever the rules say (AccessPolicyOverflowTests).
    static let stranger = ["--reuid=33", "--regid=33", "--clear-groups"]
    /// www-data, in the socket file's group (root's, as this test's keyholed runs as root) as effective group.
    static let socketGroupMember = ["--reuid=33", "--regid=0", "--clear-groups"]

    /// keyholed with a socket every user may open (mode 0666, its directory traversable).
    static func start(_ config: String = "") throws -> DaemonProcess {
        let daemon = try DaemonProcess.start(config: "[server]\nsocket_mode = \"0666\"\n" + config)
        chmod(daemon.directory.path, 0o711)
        return daemon
    }

    /// The first line of keyholed's log with `event`.
    static func line(_ daemon: DaemonProcess, _ event: String) -> String? {
        daemon.stderr.split(separator: "\n").first { $0.contains(" \(event) ") }.map(String.init)
    }

    /// The error code of `op` called as `ids`, or "ok".
    static func outcome(_ ids: [String], _ daemon: DaemonProcess, _ op: String, _ args: String = "{}") async throws -> String {
        let run = try await ChildProcess.runOffPool(["/usr/bin/setpriv"] + ids + [keyhole, "call", "--socket", daemon.socketPath, op, args])
        let output = run.stdout + run.stderr
        if run.status == 0, output.contains(#""ok":true"#) { return "ok" }
        for code in ["permission_denied", "token_malformed", "bad_request", "user_not_found", "session_not_found"] where output.contains(code) {
            return code
        }
        return "exit \(run.status): \(output)"
    }

    @Test("default policy: a stranger may only ping, and is told the operation's group; the socket's group gets verify, session and signin, not admin")
    func defaultPolicy() async throws {
        let daemon = try Self.start()
        #expect(try await Self.outcome(Self.stranger, daemon, "ping") == "ok")
        let refused = try await ChildProcess.runOffPool(
            ["/usr/bin/setpriv"] + Self.stranger + [Self.keyhole, "call", "--socket", daemon.socketPath, "session.create", #"{"sub":"u1"}"#])
        #expect((refused.stdout + refused.stderr).contains("'session.create' is in operation group 'session', which uid 33 may not use"),
            "\(refused.stdout)\(refused.stderr)")
        #expect(try await Self.outcome(Self.stranger, daemon, "token.verify", #"{"token":"x"}"#) == "permission_denied")
        #expect(try await Self.outcome(Self.stranger, daemon, "stats") == "permission_denied")

        #expect(try await Self.outcome(Self.socketGroupMember, daemon, "session.create", #"{"sub":"u1"}"#) == "ok")
        #expect(try await Self.outcome(Self.socketGroupMember, daemon, "token.verify", #"{"token":"x"}"#) == "token_malformed")
        #expect(try await Self.outcome(Self.socketGroupMember, daemon, "user.delete", #"{"sub":"u1"}"#) == "permission_denied")
        #expect(try await Self.outcome(Self.socketGroupMember, daemon, "stats") == "permission_denied")
        // This test runs as root, which may do everything.
        let connection = try RawConnection(path: daemon.socketPath)
        #expect(try connection.result("stats")["requests"] != nil)
        // Audit lines: the refusal, and a deletion with who asked for it (root, over `connection`).
        #expect(Self.line(daemon, "access.denied")?.contains("audit=true group=session op=session.create peer_pid=") == true)
        #expect(try connection.result("user.delete", ["sub": "u1"])["deleted"] == true)
        try daemon.waitForStderr(containing: "user.deleted")
        let deleted = Self.line(daemon, "user.deleted") ?? ""
        #expect(deleted.contains("audit=true issuer=local peer_pid=") && deleted.contains("peer_uid=0 sessions_revoked=1 sub=u1 trigger=user.delete"),
            "\(deleted)")

        // A reload (SIGHUP) puts rules in place for the next connections and the open ones alike.
        let config = "[server]\nsocket_mode = \"0666\"\n[[access]]\nusers = [33]\nallow = [\"verify\"]\n"
        try config.write(to: daemon.directory.appendingPathComponent("keyholed.toml"), atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        try daemon.waitForStderr(containing: "config.reloaded")
        #expect(Self.line(daemon, "config.reloaded")?.contains("applied=access audit=true") == true)
        #expect(try await Self.outcome(Self.stranger, daemon, "token.verify", #"{"token":"x"}"#) == "token_malformed")
        #expect(try await Self.outcome(Self.socketGroupMember, daemon, "session.create", #"{"sub":"u1"}"#) == "permission_denied")
        #expect(try daemon.terminate() == 0)
    }

    @Test("[[access]] rules by user name and by supplementary group replace the default; a bad rule stops the start with exit 78")
    func rules() async throws {
        let daemon = try Self.start("""
            [[access]]
            users = ["www-data"]
            allow = ["verify"]

            [[access]]
            groups = [4242]
            allow = ["session", "admin"]
            """)
        #expect(try await Self.outcome(Self.stranger, daemon, "token.verify", #"{"token":"x"}"#) == "token_malformed")
        #expect(try await Self.outcome(Self.stranger, daemon, "session.create", #"{"sub":"u2"}"#) == "permission_denied")
        let inGroup = ["--reuid=33", "--regid=33", "--groups=4242"]
        #expect(try await Self.outcome(inGroup, daemon, "session.create", #"{"sub":"u2"}"#) == "ok")
        #expect(try await Self.outcome(inGroup, daemon, "stats") == "ok")
        // With rules, the socket's group alone no longer gives anything.
        #expect(try await Self.outcome(Self.socketGroupMember, daemon, "session.create", #"{"sub":"u3"}"#) == "permission_denied")
        #expect(try daemon.terminate() == 0)

        for (rule, message) in [
            ("users = [\"no-such-user-kh\"]\nallow = [\"verify\"]", "no user named 'no-such-user-kh' on this host"),
            ("groups = [\"no-such-group-kh\"]\nallow = [\"verify\"]", "no group named 'no-such-group-kh' on this host"),
            ("users = [0]\nallow = [\"everything\"]", "'everything' is not an operation group"),
            ("users = [0]", "access[0].allow"),
            ("allow = [\"verify\"]", "a rule names users, groups or both"),
            ("users = [0]\nallow = [\"verify\"]\nuser = [1]", "user"),
            ("users = [\"nobody\"]\nallow = [\"verify\"]", "names user id 65534, the overflow id"),
            ("groups = [65534]\nallow = [\"verify\"]", "names group id 65534, the overflow id"),
        ] {
            let bad = try DaemonProcess(config: "[[access]]\n" + rule + "\n")
            #expect(try bad.waitForExit() == 78, "\(rule)")
            #expect(bad.stderr.contains(message), "\(rule): \(bad.stderr)")
        }
    }
}
