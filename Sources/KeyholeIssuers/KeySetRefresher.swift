import Logging
import ServiceLifecycle

/// The `Service` that keeps every remote issuer's keys fresh: one refresh loop per issuer over one
/// HTTP client, all stopped on graceful shutdown (the client is shut down after them).
public struct KeySetRefresher: Service {
    private let issuers: [IssuerKeys]
    private let store: KeySetStore?
    private let fetcherConfiguration: KeySetFetcher.Configuration
    private let logger: Logger

    /// A refresher for the remote ones among `issuers`, persisting fetched sets to `store`.
    public init(
        issuers: [IssuerKeys], store: KeySetStore?, fetcher: KeySetFetcher.Configuration = .init(), logger: Logger
    ) {
        self.issuers = issuers.filter { $0.configuration.keySet.isRemote }
        self.store = store
        self.fetcherConfiguration = fetcher
        self.logger = logger
    }

    /// Runs until graceful shutdown or cancellation.
    public func run() async throws {
        guard !issuers.isEmpty else {
            // Returning early would end the whole service group.
            try? await gracefulShutdown()
            return
        }
        let client = KeySetFetcher.makeClient(configuration: fetcherConfiguration)
        let fetcher = KeySetFetcher(client: client, configuration: fetcherConfiguration)
        let (issuers, store, logger) = (self.issuers, self.store, self.logger)
        await cancelWhenGracefulShutdown {
            await withTaskGroup(of: Void.self) { group in
                for keys in issuers {
                    group.addTask { await keys.run(fetcher: fetcher, store: store, logger: logger) }
                }
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
