import KeyholeIssuers
import KeyholeServer

extension DaemonConfiguration {
    /// The largest configuration file read: anything bigger is a mistake.
    static let maxFileBytes = 1 << 20

    /// Reads a configuration file. A missing file is an error only when `required` (it was named
    /// explicitly): the default path may be absent, and then the built-in defaults apply.
    static func load(path: String, required: Bool) throws(ConfigError) -> DaemonConfiguration {
        let bytes: [UInt8]
        do {
            bytes = try LocalFile.contents(of: path, maximumBytes: maxFileBytes)
        } catch {
            if error.isMissing && !required { return DaemonConfiguration() }
            throw ConfigError(key: nil, line: nil, message: error.description)
        }
        guard let text = String(validating: bytes, as: UTF8.self) else {
            throw ConfigError(key: nil, line: nil, message: "\(path) is not UTF-8 text")
        }
        return try parse(text)
    }
    /// Reads the text of keyholed.toml (see packaging/keyholed.toml for the reference).
    static func parse(_ text: String) throws(ConfigError) -> DaemonConfiguration {
        let file = try ConfigFile(text: text)
        try file.checkTables(
            allowed: ["server", "storage", "sessions", "log", "jwks", "tokens", "apple", "http", "metrics", "postgres"], arrays: ["issuer", "access"])
        var configuration = DaemonConfiguration()

        if let server = try file.section("server", keys: [
            "socket", "socket_mode", "max_frame_bytes", "max_connections", "idle_timeout", "frame_timeout",
            "max_in_flight", "drain_timeout", "threads", "backlog", "max_unsent_bytes", "max_connections_per_uid",
            "requests_per_second_per_uid", "request_burst_per_uid", "connections_per_second_per_uid", "connection_burst_per_uid",
            "frame_error_hold", "allow_unmapped_peers", "loop",
        ]) {
            if let loop = try server.string("loop") {
                guard let chosen = KeyholeServer.Loop(rawValue: loop) else {
                    throw ConfigError(key: "server.loop", line: file.line(of: "loop", in: "server"),
                        message: "must be \"nio\" or \"epoll\", got '\(loop)'")
                }
                configuration.server.loop = chosen
            }
            if let allow = try server.bool("allow_unmapped_peers") { configuration.allowUnmappedPeers = allow }
            if let socket = try server.string("socket") {
                try checkPath(socket, key: "server.socket", line: file.line(of: "socket", in: "server"), socket: true)
                configuration.socketPath = socket
            }
            if let mode = try server.mode("socket_mode") { configuration.socketMode = mode }
            if let bytes = try server.size("max_frame_bytes", in: maxFrameBytesRange) {
                configuration.server.maxFrameBytes = bytes
            }
            if let count = try server.integer("max_connections", in: maxConnectionsRange) {
                configuration.server.maxConnections = count
            }
            if let timeout = try server.duration("idle_timeout", in: timeoutRange) {
                configuration.server.idleTimeout = timeout
            }
            if let timeout = try server.duration("frame_timeout", in: timeoutRange) {
                configuration.server.frameTimeout = timeout
            }
            if let count = try server.integer("max_in_flight", in: maxInFlightRange) {
                configuration.server.maxInFlight = count
            }
            if let timeout = try server.duration("drain_timeout", in: timeoutRange) {
                configuration.server.drainTimeout = timeout
            }
            if let bytes = try server.size("max_unsent_bytes", in: maxUnsentBytesRange) {
                configuration.server.maxUnsentBytes = bytes
            }
            if let count = try server.integer("max_connections_per_uid", in: maxConnectionsRange) {
                configuration.server.maxConnectionsPerUID = count
            }
            if let rate = try server.integer("requests_per_second_per_uid", in: 0...1_000_000) {
                configuration.server.requestsPerSecondPerUID = Double(rate)
            }
            if let burst = try server.integer("request_burst_per_uid", in: 1...1_000_000) {
                configuration.server.requestBurstPerUID = Double(burst)
            }
            if let rate = try server.integer("connections_per_second_per_uid", in: 0...1_000_000) {
                configuration.server.connectionsPerSecondPerUID = Double(rate)
            }
            if let burst = try server.integer("connection_burst_per_uid", in: 1...1_000_000) {
                configuration.server.connectionBurstPerUID = Double(burst)
            }
            if let hold = try server.duration("frame_error_hold", in: frameErrorHoldRange) {
                configuration.server.frameErrorHold = hold
            }
            if let count = try server.integer("threads", in: threadsRange) { configuration.threads = count }
            if let count = try server.integer("backlog", in: backlogRange) { configuration.server.backlog = count }
        }
        if let storage = try file.section("storage", keys: [
            "dir", "fsync", "batch_interval", "snapshot_wal_bytes", "snapshot_wal_percent", "commit_on_event_loop", "backend",
        ]) {
            if let backend = try storage.string("backend") {
                guard let chosen = StorageBackend(rawValue: backend) else { throw storage.error("backend", "must be \"local\" or \"postgres\"") }
                configuration.backend = chosen
            }
            if try storage.bool("commit_on_event_loop") == false { configuration.store.inlineSyncLimit = nil }
            if let bytes = try storage.size("snapshot_wal_bytes", in: (64 << 10)...(64 << 30)) {
                configuration.store.snapshotWALBytes = bytes
            }
            if let percent = try storage.integer("snapshot_wal_percent", in: 0...10_000) {
                configuration.store.snapshotWALPercent = percent
            }
            if let dir = try storage.string("dir") {
                try checkPath(dir, key: "storage.dir", line: file.line(of: "dir", in: "storage"))
                configuration.stateDirectory = dir
            }
            let interval = try storage.duration("batch_interval", in: .milliseconds(1)...(.seconds(10)))
            switch try storage.string("fsync") {
            case nil, "always"?:
                if interval != nil {
                    throw ConfigError(key: "storage.batch_interval", line: file.line(of: "batch_interval", in: "storage"),
                        message: "applies only with fsync = \"batch\"")
                }
            case "batch"?:
                configuration.store.durability = .batch(interval: .nanoseconds((interval ?? .milliseconds(100)).nanoseconds))
            case "off"?:
                configuration.store.durability = .off
            case let other?:
                throw ConfigError(key: "storage.fsync", line: file.line(of: "fsync", in: "storage"),
                    message: "must be \"always\", \"batch\" or \"off\", got '\(other)'")
            }
        }
        if let sessions = try file.section("sessions", keys: ["ttl", "idle_timeout", "max_data"]) {
            if let ttl = try sessions.duration("ttl", in: .minutes(1)...(.hours(24 * 400))) {
                configuration.sessions.defaultTTL = ttl.nanoseconds / 1_000_000_000
            }
            if let idle = try sessions.duration("idle_timeout", in: .minutes(1)...(.hours(24 * 400))) {
                configuration.sessions.defaultIdle = idle.nanoseconds / 1_000_000_000
            }
            if let bytes = try sessions.size("max_data", in: 2...(1 << 20)) {
                configuration.sessions.maxDataBytes = bytes
            }
        }
        if let log = try file.section("log", keys: ["level"]), let level = try log.string("level") {
            configuration.logLevel = try logLevel(level, key: "log.level", line: file.line(of: "level", in: "log"))
        }
        if let jwks = try file.section("jwks", keys: ["refetch_cooldown", "max_stale"]) {
            if let cooldown = try jwks.duration("refetch_cooldown", in: .seconds(1)...(.hours(1))) {
                configuration.keySetCache.unknownKeyCooldown = Double(cooldown.nanoseconds) / 1e9
            }
            if let stale = try jwks.duration("max_stale", in: .hours(1)...(.hours(24 * 90))) {
                configuration.keySetCache.maximumStaleness = Double(stale.nanoseconds) / 1e9
            }
        }
        if let tokens = try file.section("tokens", keys: ["cache_entries"]),
            let entries = try tokens.integer("cache_entries", in: 0...10_000_000)
        {
            configuration.verifiedTokenCacheEntries = entries
        }
        configuration.issuers = try issuers(file)
        configuration.server.access.rules = try accessRules(file)
        configuration.apple = try apple(file, issuers: configuration.issuers)
        configuration.http = try http(file)
        // Refused here rather than at a user's first callback, after they consented at Apple.
        if configuration.http?.web == true && configuration.apple?.exchanges != true {
            throw ConfigError(
                key: "http.web", line: file.line(of: "web", in: "http"),
                message: "Sign in with Apple's pages need an [apple] section with code exchange (team_id, key_id, private_key_file, store_key_file) and the Services ID's redirect_uris entry")
        }
        configuration.postgres = try PostgresSettings.parse(file)
        switch (configuration.backend, configuration.postgres) {
        case (.postgres, nil):
            throw ConfigError(key: "storage.backend", line: file.line(of: "backend", in: "storage"), message: "\"postgres\" needs a [postgres] section")
        case (.local, _?):
            throw ConfigError(key: "postgres", line: file.line(ofTable: "postgres"), message: "is used only with [storage] backend = \"postgres\"")
        default:
            break
        }
        if let metrics = try file.section("metrics", keys: ["enabled"]), let enabled = try metrics.bool("enabled") {
            configuration.metricsEnabled = enabled
        }
        return configuration
    }
}
