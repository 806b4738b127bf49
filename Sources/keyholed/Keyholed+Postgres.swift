import ArgumentParser
import Foundation
import KeyholePostgres
import KeyholeProtocol
import KeyholeServer
import KeyholeStore
import Logging
import NIOCore
import NIOSSL
import PostgresNIO
import ServiceLifecycle

/// `[storage] backend = "postgres"` (Sources/KeyholePostgres/POSTGRES.md): the pool, the schema
/// brought up to date before anything is served, the store with its cache, and the listener.
struct PostgresStorage: Sendable {
    let client: PostgresClient
    let store: PostgresStore
    let listener: PostgresListener
    let pruner: PostgresPruner

    /// Its long-running parts in keyholed's service group: the listener, and the pruning of expired
    /// rows. (The pool runs from before the group: the schema is migrated before anything serves.)
    var services: [ServiceGroupConfiguration.ServiceConfiguration] {
        [.init(service: listener), .init(service: pruner)]
    }

    /// `stats`' `store` member.
    var statistics: [String: JSONValue] {
        let cache = store.cacheStatus
        var members: [String: JSONValue] = [
            "backend": "postgres", "cache_fresh": .bool(cache.fresh), "cache_entries": .int(Int64(cache.entries)),
        ]
        let batches = store.batchCounts
        members["read_batches"] = .int(Int64(batches.readBatches))
        members["reads"] = .int(Int64(batches.reads))
        members["create_batches"] = .int(Int64(batches.createBatches))
        members["creates"] = .int(Int64(batches.creates))
        if let staleness = cache.staleness { members["staleness_ms"] = .int(Int64((staleness * 1000).rounded())) }
        return ["store": .object(members)]
    }
}

extension Keyholed {
    /// Connects, migrates (refusing a schema newer than this binary: exit 78; PostgreSQL not
    /// reachable within the timeout: exit 1) and returns the storage, its pool running in `pool`.
    static func openPostgres(
        _ settings: PostgresSettings, clock: @escaping @Sendable () -> Double, pool: inout Task<Void, Never>?, logger: Logger
    ) async throws -> PostgresStorage {
        let password: String?
        do {
            password = try settings.password.map { source throws(ConfigError) in
                var bytes = try AppleSettings.readKey(
                    source, key: "postgres.password", credentialsDirectory: getenv("CREDENTIALS_DIRECTORY").map { String(cString: $0) })
                defer { AppleSettings.wipe(&bytes) }
                // One line: a trailing newline is the editor's, not the password's.
                while bytes.last == UInt8(ascii: "\n") || bytes.last == UInt8(ascii: "\r") { bytes.removeLast() }
                guard !bytes.isEmpty, let text = String(validating: bytes, as: UTF8.self), !text.contains("\n") else {
                    throw ConfigError(key: "postgres.password", line: nil, message: "\(source) must hold one line of UTF-8, the password")
                }
                return text
            }
        } catch {
            FileHandle.standardError.write(Data("keyholed: configuration error: \(error)\n".utf8))
            throw ExitCode(78)
        }
        let (clientConfiguration, connectionConfiguration) = try Self.postgresConfigurations(settings, password: password)
        if case .tcp(let host, _) = settings.address, !["localhost", "127.0.0.1", "::1"].contains(host) {
            switch settings.tls {
            case .verify: break
            case .disable, .prefer, .require:
                logger.warning("postgres.tls_unverified", metadata: [
                    "host": "\(host)", "tls": "\(settings.tls)",
                    "reason": "the server's certificate is not checked: someone in the middle can read the password and sessions",
                ])
            }
        }
        let client = PostgresClient(configuration: clientConfiguration, backgroundLogger: logger)
        pool = Task { await client.run() }
        var host = ProcessInfo.processInfo.hostName
        if host.isEmpty || host.utf8.count > 64 { host = "host" }
        var storeConfiguration = PostgresStore.Configuration()
        storeConfiguration.schema = settings.schema
        storeConfiguration.timeout = Duration(settings.timeout)
        storeConfiguration.maxStaleness = Duration(settings.maxStaleness)
        storeConfiguration.cacheEntries = settings.cacheEntries
        storeConfiguration.batchConnections = Self.batchConnections(poolSize: settings.poolSize)
        // Unique among the hosts sharing the schema: the host name, this process, and a random part
        // (containers share host names and pids; the outbox's leases go by this name).
        storeConfiguration.hostID = "\(host)-\(getpid())-\(String(UInt32.random(in: 0...UInt32.max), radix: 16))"
        var batches = connectionConfiguration
        batches.options.additionalStartupParameters = []
        let store = PostgresStore(client: client, batches: batches, configuration: storeConfiguration, now: clock, logger: logger)
        let migrator = SchemaMigrator(
            schema: settings.schema, appliedBy: "keyholed \(KeyholeVersion.current) on \(host)",
            now: { Int64(clock().rounded(.down)) }, logger: logger)
        do {
            // Ten times a call's bound (at least 5 s): DDL may wait for another host's migration.
            let bound = Duration.nanoseconds(max(5_000_000_000, 10 * settings.timeout.nanoseconds))
            let report = try await migrator.migrate(client, within: bound)
            try await store.checkSearchPath()
            logger.info("postgres.ready", metadata: [
                "schema": "\(settings.schema)", "version": "\(report.to)", "migrated": "\(report.applied.map(String.init).joined(separator: ","))",
            ])
        } catch {
            logger.critical("postgres.open_failed", metadata: ["error": "\(error.message)"])
            FileHandle.standardError.write(Data("keyholed: PostgreSQL: \(error.message)\n".utf8))
            throw ExitCode(error.isSchemaTooNew ? 78 : 1)
        }
        var listenerConfiguration = PostgresListener.Configuration()
        listenerConfiguration.heartbeatInterval = Duration(settings.maxStaleness) / 4
        let listener = PostgresListener(store: store, connection: connectionConfiguration, configuration: listenerConfiguration, logger: logger)
        return PostgresStorage(client: client, store: store, listener: listener, pruner: PostgresPruner(store: store, logger: logger))
    }

    /// Connections for each kind of batch (cache misses, creates): a quarter of `pool_size`, at least one.
    static func batchConnections(poolSize: Int) -> Int { max(1, poolSize / 4) }

    /// The pool's and the listener's settings from `[postgres]`.
    static func postgresConfigurations(
        _ settings: PostgresSettings, password: String?
    ) throws -> (PostgresClient.Configuration, PostgresConnection.Configuration) {
        var client: PostgresClient.Configuration
        var connection: PostgresConnection.Configuration
        switch settings.address {
        case .socket(let directory, let port):
            let path = "\(directory)/.s.PGSQL.\(port)"
            client = PostgresClient.Configuration(unixSocketPath: path, username: settings.user, password: password, database: settings.database)
            connection = PostgresConnection.Configuration(unixSocketPath: path, username: settings.user, password: password, database: settings.database)
        case .tcp(let host, let port):
            let (clientTLS, connectionTLS) = try Self.tls(settings.tls)
            client = PostgresClient.Configuration(
                host: host, port: port, username: settings.user, password: password, database: settings.database, tls: clientTLS)
            connection = PostgresConnection.Configuration(
                host: host, port: port, username: settings.user, password: password, database: settings.database, tls: connectionTLS)
        }
        // The batches' connections come out of pool_size (POSTGRES.md, "Cost per request").
        client.options.maximumConnections = max(1, settings.poolSize - 2 * batchConnections(poolSize: settings.poolSize))
        client.options.additionalStartupParameters = PostgresStore.startupParameters(for: settings.schema)
        client.options.connectTimeout = Duration(settings.timeout)
        connection.options.connectTimeout = settings.timeout
        connection.options.additionalStartupParameters = [("application_name", "keyholed-listener")]
        return (client, connection)
    }

    /// `[postgres] tls` as the pool's and the listener's settings.
    private static func tls(_ mode: PostgresSettings.TLS) throws -> (PostgresClient.Configuration.TLS, PostgresConnection.Configuration.TLS) {
        var tls = TLSConfiguration.makeClientConfiguration()
        switch mode {
        case .disable:
            return (.disable, .disable)
        case .prefer:
            tls.certificateVerification = .none
            return (.prefer(tls), .prefer(try NIOSSLContext(configuration: tls)))
        case .require:
            // PostgreSQL's own "require": encrypted, the certificate not checked.
            tls.certificateVerification = .none
            return (.require(tls), .require(try NIOSSLContext(configuration: tls)))
        case .verify(let caFile):
            if let caFile { tls.trustRoots = .file(caFile) }
            tls.certificateVerification = .fullVerification
            return (.require(tls), .require(try NIOSSLContext(configuration: tls)))
        }
    }
}
