import Logging
import ServiceLifecycle

/// The `Service` that keeps every remote issuer's keys fresh: one refresh loop per issuer over one
/// HTTP client, all stopped on graceful shutdown (the client is shut down after them).
///
/// It follows the registry: an issuer a reload adds gets its loop at once; one a reload replaces is
/// retired by the registry, and its loop ends.
public struct KeySetRefresher: Service {
    private let registry: IssuerRegistry
    private let store: KeySetStore?
    private let fetcherConfiguration: KeySetFetcher.Configuration
    private let logger: Logger

    /// A refresher for the remote issuers of `registry`, persisting fetched sets to `store`.
    public init(
        registry: IssuerRegistry, store: KeySetStore?, fetcher: KeySetFetcher.Configuration = .init(), logger: Logger
    ) {
        self.registry = registry
        self.store = store
        self.fetcherConfiguration = fetcher
        self.logger = logger
    }

    /// Runs until graceful shutdown or cancellation.
    public func run() async throws {
        let client = KeySetFetcher.makeClient(configuration: fetcherConfiguration)
        let fetcher = KeySetFetcher(client: client, configuration: fetcherConfiguration)
        let (registry, store, logger) = (self.registry, self.store, self.logger)
        await cancelWhenGracefulShutdown {
            await withDiscardingTaskGroup { group in
                var started: [IssuerKeys] = []
                for await issuers in registry.issuerChanges() {
                    // Loops of retired issuers end by themselves; only their objects are let go here.
                    started.removeAll { old in !issuers.contains { $0 === old } }
                    for keys in issuers where keys.configuration.keySet.isRemote && !started.contains(where: { $0 === keys }) {
                        started.append(keys)
                        group.addTask { await keys.run(fetcher: fetcher, store: store, logger: logger) }
                    }
                }
                group.cancelAll()
            }
        }
        // A failed shutdown (a request cut off by its deadline still draining) must not make a
        // clean stop look like a failure.
        do {
            try await client.shutdown()
        } catch {
            logger.notice("issuer.http_client_shutdown_failed", metadata: ["error": "\(error)"])
        }
    }
}
