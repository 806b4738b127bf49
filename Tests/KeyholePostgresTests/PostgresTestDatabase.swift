import Foundation
import KeyholePostgres
import KeyholeTestSupport
import Logging
import PostgresNIO

/// A `PostgresClient` on a test's cluster, its `run()` going for the body's length.
enum PostgresTestDatabase {
    static let logger = Logger(label: "test.postgres")
    /// The real clock, as keyholed's.
    static let clock: @Sendable () -> Double = { Date().timeIntervalSince1970 }

    /// Over the cluster's Unix socket as `keyhole` (trusted there), or with `tcp` over loopback with
    /// `password` (default: the right one).
    static func configuration(_ cluster: PostgresCluster, tcp: Bool = false, password: String? = nil) -> PostgresClient.Configuration {
        var configuration: PostgresClient.Configuration
        if tcp, let host = cluster.host {
            configuration = .init(
                host: host, port: cluster.port, username: cluster.user, password: password ?? cluster.password,
                database: cluster.database, tls: .disable)
        } else {
            configuration = .init(unixSocketPath: cluster.socketPath, username: cluster.user, password: nil, database: cluster.database)
        }
        configuration.options.connectTimeout = .seconds(10)
        configuration.options.additionalStartupParameters = PostgresStore.startupParameters(for: .standard)
        return configuration
    }

    /// A connection to `cluster` over its Unix socket as `keyhole`: a store's batch connections.
    static func connection(_ cluster: PostgresCluster) -> PostgresConnection.Configuration {
        var configuration = PostgresConnection.Configuration(
            unixSocketPath: cluster.socketPath, username: cluster.user, password: nil, database: cluster.database)
        configuration.options.connectTimeout = .seconds(10)
        return configuration
    }

    /// `body`, then `stores` shut down, whether it threw or not (a store released with a batch
    /// connection open trips postgres-nio's assertion).
    static func shuttingDown<T>(_ stores: [PostgresStore], _ body: () async throws -> T) async throws -> T {
        do {
            let value = try await body()
            for store in stores { await store.shutDown() }
            return value
        } catch {
            for store in stores { await store.shutDown() }
            throw error
        }
    }

    /// Two clients on `cluster` (two hosts' pools), the schema migrated, for `body`.
    static func withTwo(_ cluster: PostgresCluster, _ body: @escaping @Sendable (PostgresClient, PostgresClient) async throws -> Void) async throws {
        let pool = configuration(cluster)
        try await with(pool) { first in
            _ = try await SchemaMigrator(schema: .standard, appliedBy: "test", now: { 0 }, logger: logger).migrate(first)
            try await with(pool) { second in try await body(first, second) }
        }
    }

    /// A store for `client` as host `name`. Its calls' bound is long: the whole suite runs at once
    /// on two cores, and a test that is not about the bound must not fail on the machine's load.
    /// Its batches go on connections of their own to `cluster`, closed when the cluster stops.
    static func store(
        _ client: PostgresClient, _ cluster: PostgresCluster, host name: String = "host", maxStaleness: Duration = .seconds(2),
        timeout: Duration = .seconds(30), schema: SchemaName = .standard, now: @escaping @Sendable () -> Double = clock
    ) -> PostgresStore {
        var configuration = PostgresStore.Configuration()
        configuration.hostID = name
        configuration.maxStaleness = maxStaleness
        configuration.timeout = timeout
        configuration.schema = schema
        return PostgresStore(client: client, batches: connection(cluster), configuration: configuration, now: now, logger: logger)
    }

    static func with<T: Sendable>(
        _ configuration: PostgresClient.Configuration, _ body: @escaping @Sendable (PostgresClient) async throws -> T
    ) async throws -> T {
        let client = PostgresClient(configuration: configuration, backgroundLogger: logger)
        return try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                await client.run()
                return nil
            }
            defer { group.cancelAll() }
            return try await body(client)
        }
    }
}
