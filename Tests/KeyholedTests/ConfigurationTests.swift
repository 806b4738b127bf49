import Foundation
import KeyholeServer
import KeyholeTestSupport
import NIOCore
import Testing

@testable import keyholed

@Suite("keyholed configuration")
struct ConfigurationTests {
    @Test("durations", arguments: [
        ("500ms", TimeAmount.milliseconds(500)), ("10s", .seconds(10)), ("5m", .minutes(5)), ("24h", .hours(24)),
        ("30d", .hours(720)),
    ])
    func durations(text: String, expected: TimeAmount) {
        #expect(ConfigParsing.duration(text) == expected)
        // Written back in the largest unit that divides it ("24h" as "1d"), which reads the same.
        #expect(ConfigParsing.duration(ConfigParsing.durationText(expected)) == expected)
        #expect(ConfigParsing.durationText(expected) == (text == "24h" ? "1d" : text))
    }

    @Test("a duration out of its key's range names that range", arguments: [
        ("[storage]\nfsync = \"batch\"\nbatch_interval = \"20s\"\n", "must be from 1ms to 10s, got \"20s\""),
        ("[jwks]\nmax_stale = \"30m\"\n", "must be from 1h to 90d, got \"30m\""),
        ("[server]\nidle_timeout = \"5ms\"\n", "must be from 10ms to 30d, got \"5ms\""),
    ])
    func durationRanges(text: String, message: String) {
        let error = #expect(throws: ConfigError.self) { try DaemonConfiguration.parse(text) }
        #expect(error?.message.contains(message) == true, "\(error?.message ?? "accepted")")
    }

    @Test("bad durations", arguments: ["", "10", "s", "1.5s", "-1s", "10 s", "10sec", "5M", "9999999999s", "999999999d"])
    func badDurations(text: String) {
        #expect(ConfigParsing.duration(text) == nil)
    }

    @Test("sizes and modes")
    func sizesAndModes() {
        #expect(ConfigParsing.size("64KiB") == 65536)
        #expect(ConfigParsing.size("16MiB") == 16 * 1024 * 1024)
        #expect(ConfigParsing.size("512") == 512)
        #expect(ConfigParsing.size("512B") == 512)
        #expect(ConfigParsing.size("1.5MiB") == nil)
        #expect(ConfigParsing.size("64kb") == nil)
        #expect(ConfigParsing.mode("0660") == 0o660)
        #expect(ConfigParsing.mode("600") == 0o600)
        #expect(ConfigParsing.mode("0668") == nil)
        #expect(ConfigParsing.mode("01777") == nil)
    }

    @Test("the reference file packaging/keyholed.toml parses, and states the real defaults")
    func referenceFile() throws {
        let path = Vectors.directory.deletingLastPathComponent().deletingLastPathComponent()
            .appendingPathComponent("packaging/keyholed.toml").path
        let parsed = try DaemonConfiguration.load(path: path, required: true)
        let defaults = DaemonConfiguration()
        #expect(parsed.socketPath == defaults.socketPath)
        #expect(parsed.socketMode == defaults.socketMode)
        #expect(parsed.stateDirectory == defaults.stateDirectory)
        #expect(parsed.logLevel == defaults.logLevel)
        #expect(parsed.server.maxFrameBytes == defaults.server.maxFrameBytes)
        #expect(parsed.server.maxConnections == defaults.server.maxConnections)
        #expect(parsed.server.idleTimeout == defaults.server.idleTimeout)
        #expect(parsed.server.frameTimeout == defaults.server.frameTimeout)
        #expect(parsed.server.maxInFlight == defaults.server.maxInFlight)
        #expect(parsed.server.drainTimeout == defaults.server.drainTimeout)
        #expect(parsed.server.maxUnsentBytes == defaults.server.maxUnsentBytes)
        #expect(parsed.server.maxConnectionsPerUID == defaults.server.maxConnectionsPerUID)
        #expect(parsed.server.requestsPerSecondPerUID == defaults.server.requestsPerSecondPerUID)
        #expect(parsed.server.requestBurstPerUID == defaults.server.requestBurstPerUID)
        #expect(parsed.server.connectionsPerSecondPerUID == defaults.server.connectionsPerSecondPerUID)
        #expect(parsed.server.connectionBurstPerUID == defaults.server.connectionBurstPerUID)
        #expect(parsed.server.frameErrorHold == defaults.server.frameErrorHold)
        let limits = try DaemonConfiguration.parse("""
            [server]
            max_unsent_bytes = "256KiB"
            max_connections_per_uid = 8
            requests_per_second_per_uid = 50
            request_burst_per_uid = 200
            connections_per_second_per_uid = 30
            connection_burst_per_uid = 90
            frame_error_hold = "250ms"
            """).server
        #expect(limits.connectionsPerSecondPerUID == 30 && limits.connectionBurstPerUID == 90 && limits.frameErrorHold == .milliseconds(250))
        #expect(try DaemonConfiguration.parse("[server]\nframe_error_hold = \"0s\"\n").server.frameErrorHold == .zero)
        #expect(limits.maxUnsentBytes == 256 << 10)
        #expect(limits.maxConnectionsPerUID == 8)
        #expect(limits.requestsPerSecondPerUID == 50)
        #expect(limits.requestBurstPerUID == 200)
        #expect(parsed.threads == defaults.threads)
        #expect(defaults.threads == max(1, System.coreCount / 2))
        #expect(try DaemonConfiguration.parse("[server]\nthreads = 4\n").threads == 4)
        #expect(try DaemonConfiguration.parse("[server]\nthreads = 4\n").serverConfiguration.threads == 4)
        #expect(defaults.server.loop == .epoll)
        #expect(try DaemonConfiguration.parse("[server]\nloop = \"epoll\"\n").server.loop == .epoll)
        #expect(try DaemonConfiguration.parse("[server]\nloop = \"nio\"\n").server.loop == .nio)
        #expect(parsed.keySetCache == defaults.keySetCache)
        #expect(parsed.verifiedTokenCacheEntries == defaults.verifiedTokenCacheEntries)
        #expect(parsed.issuers.isEmpty)
        #expect(parsed.store.durability == defaults.store.durability)
        #expect(parsed.store.snapshotWALBytes == defaults.store.snapshotWALBytes)
        #expect(parsed.store.snapshotWALPercent == defaults.store.snapshotWALPercent)
    }

    @Test("[storage] sets durability and the snapshot size")
    func storageSettings() throws {
        let parsed = try DaemonConfiguration.parse("[storage]\nfsync = \"batch\"\nbatch_interval = \"20ms\"\nsnapshot_wal_bytes = \"1MiB\"\n")
        #expect(parsed.store.durability == .batch(interval: .milliseconds(20)))
        #expect(parsed.store.snapshotWALBytes == 1 << 20)
        #expect(parsed.store.snapshotWALPercent == 100)
        #expect(try DaemonConfiguration.parse("[storage]\nsnapshot_wal_percent = 0\n").store.snapshotWALPercent == 0)
        #expect(try DaemonConfiguration.parse("[storage]\nsnapshot_wal_percent = 250\n").store.snapshotWALPercent == 250)
    }

    @Test("[storage] commit_on_event_loop: on by default, false leaves every commit to the log's thread")
    func commitOnEventLoop() throws {
        #expect(try DaemonConfiguration.parse("").store.inlineSyncLimit == .milliseconds(2))
        #expect(try DaemonConfiguration.parse("[storage]\ncommit_on_event_loop = true\n").store.inlineSyncLimit == .milliseconds(2))
        #expect(try DaemonConfiguration.parse("[storage]\ncommit_on_event_loop = false\n").store.inlineSyncLimit == nil)
    }

    @Test("[jwks] and [tokens] set the cache's rules")
    func cacheSettings() throws {
        let parsed = try DaemonConfiguration.parse("""
            [jwks]
            refetch_cooldown = "5s"
            max_stale = "2d"
            [tokens]
            cache_entries = 0
            """)
        #expect(parsed.keySetCache.unknownKeyCooldown == 5)
        #expect(parsed.keySetCache.maximumStaleness == 2 * 86_400)
        #expect(parsed.verifiedTokenCacheEntries == 0)
    }

    @Test("issuers: a remote jwks_uri, discovery (iss defaults to its URL), and a preset's spellings kept")
    func remoteIssuers() throws {
        let parsed = try DaemonConfiguration.parse("""
            [[issuer]]
            name = "apple"
            preset = "apple"
            audiences = ["com.example.app"]
            [[issuer]]
            name = "corp"
            discovery = "https://login.example.com"
            audiences = ["client"]
            [[issuer]]
            name = "google"
            preset = "google"
            discovery = "https://accounts.google.com"
            audiences = ["1.apps.googleusercontent.com"]
            [[issuer]]
            name = "local"
            iss = "http://127.0.0.1:8080"
            jwks_uri = "http://127.0.0.1:8080/keys"
            audiences = ["x"]
            """)
        #expect(parsed.issuers.map(\.keySet) == [
            .url("https://appleid.apple.com/auth/keys"), .discovery("https://login.example.com"),
            .discovery("https://accounts.google.com"), .url("http://127.0.0.1:8080/keys"),
        ])
        #expect(parsed.issuers[1].issuer == "https://login.example.com")
        #expect(parsed.issuers[2].policy.acceptsIssuer("accounts.google.com"))
    }

    /// URLs a prefix test took for loopback or https, and their friends (issue 26, finding 4).
    static let hostileURLs = [
        "http://127.0.0.1:80@evil.example/", "https://127.0.0.1:80@evil.example/", "http://user@127.0.0.1/",
        "http://localhost.evil.example/", "http://127.0.0.1.evil.example/", "HTTP://evil.example/",
        "http://127.0.0.1#@evil.example/", "http://127.1/", "https://x.example/a#b",
    ]

    @Test("every configured URL is parsed: user information and hosts that only look like loopback are refused", arguments: hostileURLs)
    func hostileURL(url: String) {
        let files: [(String, String)] = [
            ("[[issuer]]\nname = \"x\"\niss = \"i\"\njwks_uri = \"\(url)\"\naudiences = [\"a\"]\n", "issuer[0].jwks_uri"),
            ("[[issuer]]\nname = \"x\"\ndiscovery = \"\(url)\"\naudiences = [\"a\"]\n", "issuer[0].discovery"),
            (Self.appleIssuer + "[apple]\nendpoint = \"\(url.dropLast())\"\n", "apple.endpoint"),
            (Self.appleIssuer + "[apple]\nredirect_uris = { \"com.example.web\" = \"\(url)cb\" }\n", "apple.redirect_uris"),
        ]
        for (text, key) in files {
            do {
                _ = try DaemonConfiguration.parse(text)
                Issue.record("accepted \(url) as \(key)")
            } catch {
                #expect(error.key == key, "\(error)")
            }
        }
    }

    @Test("loopback http in any spelling of the scheme, [::1], and https are accepted where URLs are configured")
    func loopbackURLs() throws {
        for url in ["http://[::1]:8080", "HTTP://127.0.0.1:8080", "http://localhost", "https://login.example.com"] {
            let parsed = try DaemonConfiguration.parse("""
                [[issuer]]
                name = "x"
                discovery = "\(url)"
                audiences = ["com.example.web"]
                [[issuer]]
                name = "y"
                iss = "y"
                jwks_uri = "\(url)/keys"
                audiences = ["a"]
                [apple]
                issuer = "x"
                endpoint = "\(url)"
                redirect_uris = { "com.example.web" = "\(url)/cb" }
                """)
            #expect(parsed.issuers.map(\.keySet) == [.discovery(url), .url(url + "/keys")])
            #expect(parsed.apple?.endpoint == url)
            #expect(parsed.apple?.redirectURIs == ["com.example.web": url + "/cb"])
        }
    }

    @Test("an absent default file means built-in defaults; an absent named file is an error")
    func missingFile() throws {
        #expect(try DaemonConfiguration.load(path: "/nonexistent/keyholed.toml", required: false).socketPath
            == DaemonConfiguration().socketPath)
        let error = #expect(throws: ConfigError.self) { try DaemonConfiguration.load(path: "/nonexistent/keyholed.toml", required: true) }
        #expect(error?.message == "cannot read /nonexistent/keyholed.toml: No such file or directory", "\(error?.message ?? "accepted")")
    }

    /// (file, key the message must name, line it must give)
    static let badFiles: [(String, String, Int?)] = [
        ("[server]\nmax_frame_bytes = 5\n", "server.max_frame_bytes", 2),
        ("[server]\nmax_frame_bytes = \"17MiB\"\n", "server.max_frame_bytes", 2),
        ("[server]\nsocket_mode = \"0660\"\n\n  idle_timeout = 5\n", "server.idle_timeout", 4),
        ("[server]\nframe_timeout = \"soon\"\n", "server.frame_timeout", 2),
        ("[server]\nmax_connections = \"many\"\n", "server.max_connections", 2),
        ("[server]\nmax_in_flight = 0\n", "server.max_in_flight", 2),
        ("[server]\nthreads = 0\n", "server.threads", 2),
        ("[server]\nloop = \"uring\"\n", "server.loop", 2),
        ("[server]\nmax_unsent_bytes = \"32KiB\"\n", "server.max_unsent_bytes", 2),
        ("[server]\nmax_connections_per_uid = 0\n", "server.max_connections_per_uid", 2),
        ("[server]\nrequests_per_second_per_uid = -1\n", "server.requests_per_second_per_uid", 2),
        ("[server]\nrequests_per_second_per_uid = 1.5\n", "server.requests_per_second_per_uid", 2),
        ("[server]\nrequest_burst_per_uid = 0\n", "server.request_burst_per_uid", 2),
        ("[server]\nconnections_per_second_per_uid = -1\n", "server.connections_per_second_per_uid", 2),
        ("[server]\nconnection_burst_per_uid = 0\n", "server.connection_burst_per_uid", 2),
        ("[server]\nframe_error_hold = \"11m\"\n", "server.frame_error_hold", 2),
        ("[server]\nframe_error_hold = 1\n", "server.frame_error_hold", 2),
        ("[storage]\nsnapshot_wal_percent = -1\n", "storage.snapshot_wal_percent", 2),
        ("[storage]\nsnapshot_wal_percent = 10001\n", "storage.snapshot_wal_percent", 2),
        ("[server]\nthreads = 257\n", "server.threads", 2),
        ("[server]\nsocket = \"relative.sock\"\n", "server.socket", 2),
        ("[server]\nsocket = \"/\(String(repeating: "x", count: 120))\"\n", "server.socket", 2),
        ("[server]\nsocket_mode = \"rw\"\n", "server.socket_mode", 2),
        ("[server]\nsocket_mode = 660\n", "server.socket_mode", 2),
        ("[server]\nidle_timeout = \"999999999d\"\n", "server.idle_timeout", 2),
        ("[server]\ndrain_timeout = \"0ms\"\n", "server.drain_timeout", 2),
        ("[server]\nfoo = 1\n", "server.foo", 2),
        ("# comment\n[sever]\nfoo = 1\n", "sever", 2),
        ("debug = true\n", "debug", 1),
        ("server = 1\n", "server", 1),
        ("[log]\nlevel = \"loud\"\n", "log.level", 2),
        ("[storage]\ndir = 7\n", "storage.dir", 2),
        ("[storage]\nsnapshot_wal_bytes = \"1KiB\"\n", "storage.snapshot_wal_bytes", 2),
        ("[storage]\ncommit_on_event_loop = \"no\"\n", "storage.commit_on_event_loop", 2),
        ("[storage]\nfsync = \"always\"\nsnapshot_wal_bytes = \"lots\"\n", "storage.snapshot_wal_bytes", 3),
        ("[server\n", "", 1),
        ("[apple]\nteam_id = \"TEAM123456\"\n", "apple.issuer", nil),
        (appleIssuer + "[apple]\nteam_id = \"team\"\n", "apple.team_id", 7),
        (appleIssuer + "[apple]\nteam_id = \"TEAM123456\"\n", "apple.key_id", nil),
        (appleIssuer + "[apple]\nteam_id = \"TEAM123456\"\nkey_id = \"KEY1234567\"\nprivate_key_file = \"/k.p8\"\n", "apple.store_key_file", nil),
        (appleIssuer + "[apple]\nprivate_key_file = \"k.p8\"\n", "apple.private_key_file", 7),
        (appleIssuer + "[apple]\nstore_key_file = \"/s\"\nstore_key_credential = \"s\"\n", "apple.store_key_credential", 8),
        (appleIssuer + "[apple]\nstore_key_credential = \"../s\"\n", "apple.store_key_credential", 7),
        (appleIssuer + "[apple]\nclient_ids = [\"com.other\"]\n", "apple.client_ids", 7),
        (appleIssuer + "[apple]\nredirect_uris = { \"com.other\" = \"https://x\" }\n", "apple.redirect_uris", 7),
        (appleIssuer + "[apple]\nredirect_uris = { \"com.example.web\" = \"http://example.com/cb\" }\n", "apple.redirect_uris", 7),
        (appleIssuer + "[apple]\nendpoint = \"http://appleid.apple.com\"\n", "apple.endpoint", 7),
        (appleIssuer + "[apple]\nsecret = 1\n", "apple.secret", 7),
        (appleIssuer + "[apple]\nrefresh_check_interval = \"12h\"\n", "apple.refresh_check_interval", 7),
        (appleIssuer + "[apple]\nrefresh_checks_per_minute = 0\n", "apple.refresh_checks_per_minute", 7),
        (appleIssuer + "[apple]\non_revoked = \"delete\"\n", "apple.on_revoked", 7),
        (appleIssuer + "[apple]\nweb_client_id = \"com.example.web\"\n", "apple.web_client_id", 7),
        (appleIssuer + "[apple]\nweb_return_origins = [\"https://example.com/path\"]\n", "apple.web_return_origins", 7),
        (appleIssuer + "[apple]\nweb_return_origins = [\"http://example.com\"]\n", "apple.web_return_origins", 7),
        (appleIssuer + "[apple]\nweb_cookie = \"kh apple\"\n", "apple.web_cookie", 7),
        (appleIssuer + "[apple]\nweb_cookie = \"a=b\"\n", "apple.web_cookie", 7),
        (appleIssuer + "[apple]\nweb_pending_per_peer = 0\n", "apple.web_pending_per_peer", 7),
        (appleIssuer + "[apple]\nweb_pending_max = 0\n", "apple.web_pending_max", 7),
        // The pages need Apple, and code exchange: a callback could complete no sign-in without it.
        ("[http]\nsocket = \"/run/h.sock\"\nweb = true\n", "http.web", 3),
        (appleIssuer + "[apple]\nredirect_uris = { \"com.example.web\" = \"https://example.com/cb\" }\n[http]\nsocket = \"/run/h.sock\"\nweb = true\n", "http.web", 10),
    ]

    static let appleIssuer = """
        [[issuer]]
        name = "apple"
        preset = "apple"
        audiences = ["com.example.app", "com.example.web"]


        """

    @Test("[apple]: client ids default to the issuer's audiences; redirect URIs per web client")
    func apple() throws {
        let parsed = try DaemonConfiguration.parse(Self.appleIssuer + """
            [apple]
            team_id = "TEAM123456"
            key_id = "KEY1234567"
            private_key_credential = "apple-key"
            store_key_file = "/etc/keyhole/store.key"
            redirect_uris = { "com.example.web" = "https://example.com/auth/apple" }
            """)
        let apple = try #require(parsed.apple)
        #expect(apple.clientIDs == ["com.example.app", "com.example.web"])
        #expect(apple.privateKey == .credential("apple-key"))
        #expect(apple.storeKey == .file("/etc/keyhole/store.key"))
        #expect(apple.redirectURIs == ["com.example.web": "https://example.com/auth/apple"])
        #expect(apple.endpoint == "https://appleid.apple.com")
        #expect(apple.refreshChecks == AppleRefreshChecks.Configuration())
        #expect(apple.refreshChecks.interval == 86_400 && apple.refreshChecks.perMinute == 60 && apple.refreshChecks.onRevoked == .revokeSessions)
        let tuned = try #require(try DaemonConfiguration.parse(Self.appleIssuer + """
            [apple]
            refresh_check_interval = "2d"
            refresh_checks_per_minute = 10
            on_revoked = "flag"
            """).apple)
        #expect(tuned.refreshChecks.interval == 2 * 86_400 && tuned.refreshChecks.perMinute == 10 && tuned.refreshChecks.onRevoked == .flag)
        #expect(apple.web == AppleOperations.Web(), "the web flow's defaults")
        let web = try #require(try DaemonConfiguration.parse(Self.appleIssuer + """
            [apple]
            redirect_uris = { "com.example.web" = "https://example.com/auth/apple" }
            web_client_id = "com.example.web"
            web_return_origins = ["https://App.Example.com/", "https://example.com:8443", "http://127.0.0.1:8080"]
            web_cookie = "__Host-signin"
            web_pending_per_peer = 5
            web_pending_max = 50
            """).apple?.web)
        #expect(web.clientID == "com.example.web")
        #expect(web.returnOrigins == ["https://app.example.com", "https://example.com:8443", "http://127.0.0.1:8080"])
        #expect(web.cookieName == "__Host-signin" && web.pendingPerPeer == 5 && web.pendingMax == 50)
        // Verification-only Apple: no team key, no exchange, no store key needed.
        let plain = try #require(try DaemonConfiguration.parse(Self.appleIssuer + "[apple]\nclient_ids = [\"com.example.app\"]\n").apple)
        #expect(!plain.exchanges)
        #expect(plain.clientIDs == ["com.example.app"])
        #expect(try DaemonConfiguration.parse("").apple == nil)
        // The store key: 32 raw bytes or 64 hex digits.
        #expect(AppleSettings.storeKeyBytes(Array(repeating: 7, count: 32)) == Array(repeating: 7, count: 32))
        #expect(AppleSettings.storeKeyBytes(Array((String(repeating: "0a", count: 32) + "\n").utf8)) == Array(repeating: 10, count: 32))
        #expect(AppleSettings.storeKeyBytes(Array(repeating: 7, count: 31)) == nil)
        #expect(AppleSettings.storeKeyBytes(Array(String(repeating: "zz", count: 32).utf8)) == nil)
    }

    @Test("a bad file is refused with the key and its line", arguments: badFiles)
    func badFile(text: String, key: String, line: Int?) {
        do {
            _ = try DaemonConfiguration.parse(text)
            Issue.record("accepted: \(text)")
        } catch {
            #expect(error.key ?? "" == key)
            #expect(error.line == line)
            #expect(!error.message.isEmpty)
        }
    }
}

@Suite("keyholed configuration, end to end", .serialized, .ownThreads)
struct ConfigurationEndToEndTests {
    @Test("bad configuration stops keyholed with exit status 78 and a message naming the key and line")
    func badConfigExits78() throws {
        for (text, key, line) in ConfigurationTests.badFiles {
            let daemon = try DaemonProcess(config: text)
            #expect(try daemon.waitForExit() == 78, "\(text)")
            #expect(daemon.stderr.contains("configuration error"))
            if !key.isEmpty { #expect(daemon.stderr.contains(key)) }
            if let line { #expect(daemon.stderr.contains("line \(line)"), "\(daemon.stderr)") }
        }
    }

    @Test("bad flags exit 78 too, with the flag and what is wrong with it", arguments: [
        (["--log-level", "loud"], "--log-level: unknown log level 'loud'"),
        (["--socket", "relative.sock"], "--socket: must be an absolute path, got 'relative.sock'"),
        (["--state-dir", "state"], "--state-dir: must be an absolute path, got 'state'"),
    ])
    func badFlags(arguments: [String], message: String) throws {
        let daemon = try DaemonProcess(arguments: arguments)
        #expect(try daemon.waitForExit() == 78)
        #expect(daemon.stderr.contains("configuration error: " + message), "\(daemon.stderr)")
    }

    @Test("a named configuration file that does not exist exits 78")
    func missingNamedFile() throws {
        let daemon = try DaemonProcess(arguments: ["--config", "/nonexistent/keyholed.toml"])
        #expect(try daemon.waitForExit() == 78)
        #expect(daemon.stderr.contains("configuration error: cannot read /nonexistent/keyholed.toml: No such file or directory"), "\(daemon.stderr)")
    }
}
