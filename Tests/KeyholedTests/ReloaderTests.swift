import KeyholeIssuers
import Logging
import Testing

@testable import keyholed

/// What a reload applies and what it keeps for a restart, decided without a daemon.
@Suite("Reloader")
struct ReloaderTests {
    static let issuer = """
        [[issuer]]
        name = "apple"
        preset = "apple"
        jwks_uri = "/k.json"
        audiences = ["com.example.app", "com.example.web"]

        """

    static func parse(_ text: String) throws -> DaemonConfiguration {
        try DaemonConfiguration.parse(issuer + text)
    }

    @Test("restart-only settings keep their running values and are named; live ones are applied")
    func restartOnly() throws {
        let running = try Self.parse("[server]\nsocket = \"/run/a.sock\"\nthreads = 1\n[apple]\nclient_ids = [\"com.example.app\"]\n")
        let file = try Self.parse("""
            [server]
            socket = "/run/b.sock"
            threads = 2
            max_connections = 10
            [storage]
            dir = "/var/lib/other"
            commit_on_event_loop = false
            [log]
            level = "debug"
            [apple]
            client_ids = ["com.example.app", "com.example.web"]
            endpoint = "http://127.0.0.1:9"
            """)
        let (effective, kept) = Reloader.keepingRestartOnly(running, in: file)
        #expect(kept == ["server.socket", "server.threads", "storage.dir", "storage.commit_on_event_loop", "apple"])
        #expect(effective.socketPath == "/run/a.sock")
        #expect(effective.store.inlineSyncLimit == running.store.inlineSyncLimit)
        #expect(effective.threads == 1)
        #expect(effective.stateDirectory == running.stateDirectory)
        #expect(effective.apple?.endpoint == "https://appleid.apple.com")
        #expect(effective.apple?.clientIDs == ["com.example.app", "com.example.web"])
        #expect(Reloader.liveChanges(from: running, to: effective) == ["server.max_connections", "log.level", "apple.client_ids"])
    }

    @Test("an [apple] section added or removed waits for a restart; an unchanged file changes nothing")
    func appleSection() throws {
        let without = try Self.parse("")
        let with = try Self.parse("[apple]\n")
        #expect(Reloader.keepingRestartOnly(without, in: with).1 == ["apple"])
        #expect(Reloader.keepingRestartOnly(with, in: without).0.apple != nil)
        let (same, kept) = Reloader.keepingRestartOnly(with, in: with)
        #expect(kept.isEmpty)
        #expect(Reloader.liveChanges(from: with, to: same).isEmpty)
    }

    @Test("issuers added, removed or changed are each named")
    func issuers() throws {
        let running = try Self.parse("")
        let file = try DaemonConfiguration.parse("""
            [[issuer]]
            name = "apple"
            preset = "apple"
            jwks_uri = "/k.json"
            audiences = ["com.example.app"]

            [[issuer]]
            name = "google"
            preset = "google"
            audiences = ["x.apps.googleusercontent.com"]
            """)
        #expect(Reloader.liveChanges(from: running, to: file) == ["issuer.apple", "issuer.google"])
        #expect(Reloader.liveChanges(from: file, to: running) == ["issuer.apple", "issuer.google"])
    }

    @Test("the log level is read at each event: a reload changes it for loggers made before; the lifecycle logger stays at notice or above")
    func logLevel() {
        let control = LogLevelControl(.info)
        let logger = Logger(label: "keyholed") { LineLogHandler(label: $0, level: control.level(for: $0)) }
        let lifecycle = Logger(label: LogLevelControl.lifecycleLabel) { LineLogHandler(label: $0, level: control.level(for: $0)) }
        #expect(logger.logLevel == .info)
        #expect(lifecycle.logLevel == .notice)
        control.level = .debug
        #expect(logger.logLevel == .debug)
        #expect(lifecycle.logLevel == .notice)
        control.level = .error
        #expect(logger.logLevel == .error)
        #expect(lifecycle.logLevel == .error)
        var fixed = logger
        fixed.logLevel = .trace
        #expect(fixed.logLevel == .trace)
        #expect(logger.logLevel == .error)
    }
}
