extension Reloader {
    /// `file` with every setting that cannot change live put back to its `running` value, and the
    /// keys of those that differed.
    static func keepingRestartOnly(_ running: DaemonConfiguration, in file: DaemonConfiguration) -> (DaemonConfiguration, [String]) {
        var effective = file
        var kept: [String] = []
        func keep<Value: Equatable>(_ key: String, _ path: WritableKeyPath<DaemonConfiguration, Value>) {
            if effective[keyPath: path] != running[keyPath: path] {
                kept.append(key)
                effective[keyPath: path] = running[keyPath: path]
            }
        }
        keep("server.socket", \.socketPath)
        keep("server.socket_mode", \.socketMode)
        keep("server.threads", \.threads)
        keep("server.loop", \.server.loop)
        keep("server.backlog", \.server.backlog)
        keep("server.allow_unmapped_peers", \.allowUnmappedPeers)
        keep("storage.dir", \.stateDirectory)
        keep("storage.fsync", \.store.durability)
        keep("storage.snapshot_wal_bytes", \.store.snapshotWALBytes)
        keep("storage.snapshot_wal_percent", \.store.snapshotWALPercent)
        keep("storage.commit_on_event_loop", \.store.inlineSyncLimit)
        keep("tokens.cache_entries", \.verifiedTokenCacheEntries)
        keep("http", \.http)
        keep("metrics.enabled", \.metricsEnabled)
        keep("jwks", \.keySetCache)
        // [apple]: the client ids, redirect URIs and endpoint change live, and so do the team id, key
        // id and private key while code exchange stays on. The rest was set up at start-up: the
        // issuer, the store key (it seals the refresh tokens already stored), the refresh checks, the
        // web flow, and code exchange itself (on or off).
        switch (running.apple, file.apple) {
        case (nil, nil):
            break
        case (nil, _?), (_?, nil):
            kept.append("apple")
            effective.apple = running.apple
        case (let old?, let new?):
            var merged = old
            merged.clientIDs = new.clientIDs
            merged.redirectURIs = new.redirectURIs
            merged.endpoint = new.endpoint
            if old.exchanges == new.exchanges {
                merged.teamID = new.teamID
                merged.keyID = new.keyID
                merged.privateKey = new.privateKey
            }
            if merged != new { kept.append("apple") }
            effective.apple = merged
        }
        return (effective, kept)
    }

    /// The keys whose values change live between `running` and `effective`.
    static func liveChanges(from running: DaemonConfiguration, to effective: DaemonConfiguration) -> [String] {
        var changed: [String] = []
        func compare<Value: Equatable>(_ key: String, _ path: KeyPath<DaemonConfiguration, Value>) {
            if running[keyPath: path] != effective[keyPath: path] { changed.append(key) }
        }
        compare("server.max_frame_bytes", \.server.maxFrameBytes)
        compare("server.max_connections", \.server.maxConnections)
        compare("server.idle_timeout", \.server.idleTimeout)
        compare("server.frame_timeout", \.server.frameTimeout)
        compare("server.max_in_flight", \.server.maxInFlight)
        compare("server.drain_timeout", \.server.drainTimeout)
        compare("server.max_unsent_bytes", \.server.maxUnsentBytes)
        compare("server.max_connections_per_uid", \.server.maxConnectionsPerUID)
        compare("server.requests_per_second_per_uid", \.server.requestsPerSecondPerUID)
        compare("server.request_burst_per_uid", \.server.requestBurstPerUID)
        compare("server.connections_per_second_per_uid", \.server.connectionsPerSecondPerUID)
        compare("server.connection_burst_per_uid", \.server.connectionBurstPerUID)
        compare("server.frame_error_hold", \.server.frameErrorHold)
        compare("sessions.ttl", \.sessions.defaultTTL)
        compare("sessions.idle_timeout", \.sessions.defaultIdle)
        compare("sessions.max_data", \.sessions.maxDataBytes)
        compare("log.level", \.logLevel)
        compare("access", \.server.access.rules)
        compare("apple.client_ids", \.apple?.clientIDs)
        compare("apple.redirect_uris", \.apple?.redirectURIs)
        compare("apple.endpoint", \.apple?.endpoint)
        compare("apple.team_id", \.apple?.teamID)
        compare("apple.key_id", \.apple?.keyID)
        compare("apple.private_key", \.apple?.privateKey)
        let old = Dictionary(running.issuers.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        let new = Dictionary(effective.issuers.map { ($0.name, $0) }, uniquingKeysWith: { first, _ in first })
        for name in Set(old.keys).union(new.keys).sorted() where old[name] != new[name] {
            changed.append("issuer.\(name)")
        }
        return changed
    }
}
