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
            refresh_check_interval = "48h"
            """)
        let (effective, kept) = Reloader.keepingRestartOnly(running, in: file)
        #expect(kept == ["server.socket", "server.threads", "storage.dir", "storage.commit_on_event_loop", "apple"])
        #expect(effective.socketPath == "/run/a.sock")
        #expect(effective.store.inlineSyncLimit == running.store.inlineSyncLimit)
        #expect(effective.threads == 1)
        #expect(effective.stateDirectory == running.stateDirectory)
        #expect(effective.apple?.refreshChecks == running.apple?.refreshChecks)
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

    @Test("with code exchange on before and after, a new team key, key id, team id and endpoint are live; turning code exchange on or off, or another store key, waits for a restart")
    func appleTeamKey() throws {
        func apple(team: String = "TEAM123456", key: String = "KEY1234567", file: String = "/etc/keyhole/AuthKey_A.p8",
                   store: String = "/etc/keyhole/store.key", endpoint: String = "https://appleid.apple.com") throws -> DaemonConfiguration {
            try Self.parse("""
                [apple]
                team_id = "\(team)"
                key_id = "\(key)"
                private_key_file = "\(file)"
                store_key_file = "\(store)"
                endpoint = "\(endpoint)"
                """)
        }
        let running = try apple()
        let rotated = try apple(team: "TEAM654321", key: "KEY7654321", file: "/etc/keyhole/AuthKey_B.p8", endpoint: "http://127.0.0.1:9")
        let (effective, kept) = Reloader.keepingRestartOnly(running, in: rotated)
        #expect(kept.isEmpty)
        #expect(effective.apple == rotated.apple)
        #expect(Reloader.liveChanges(from: running, to: effective) == ["apple.endpoint", "apple.team_id", "apple.key_id", "apple.private_key"])

        // The store key seals the refresh tokens already stored: another one is not taken live.
        let (sameStore, keptStore) = Reloader.keepingRestartOnly(running, in: try apple(key: "KEY7654321", store: "/etc/keyhole/other.key"))
        #expect(keptStore == ["apple"])
        #expect(sameStore.apple?.storeKey == running.apple?.storeKey)
        #expect(sameStore.apple?.keyID == "KEY7654321")

        // Code exchange turned off, or on: the revocations and refresh checks were set up at start-up.
        let off = try Self.parse("[apple]\n")
        let (stillOn, keptOff) = Reloader.keepingRestartOnly(running, in: off)
        #expect(keptOff == ["apple"])
        #expect(stillOn.apple == running.apple)
        let (stillOff, keptOn) = Reloader.keepingRestartOnly(off, in: running)
        #expect(keptOn == ["apple"])
        #expect(stillOff.apple?.exchanges == false)
        #expect(stillOff.apple?.privateKey == nil)
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
