import Logging
import ServiceLifecycle

/// Removes expired rows (POSTGRES.md, "Writes"): sessions past their expiry, or idle past their idle
/// timeout and a grace, in batches, every `interval` with jitter so that hosts do not prune in step.
/// Reads ignore expired rows already; this only keeps the tables from growing.
public struct PostgresPruner: Service {
    public struct Configuration: Sendable {
        /// Between two rounds, ±20 %.
        public var interval: Duration = .seconds(60)
        /// Rows per statement.
        public var batch = 1000
        public init() {}
    }

    private let store: PostgresStore
    private let configuration: Configuration
    private let logger: Logger

    public init(store: PostgresStore, configuration: Configuration = Configuration(), logger: Logger) {
        self.store = store
        self.configuration = configuration
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            while !Task.isCancelled {
                let jitter = Double.random(in: 0.8...1.2)
                // Cancelled at shutdown: a normal end, not a failure of the service.
                do { try await Task.sleep(for: configuration.interval * jitter) } catch { return }
                let now = Int64(store.now().rounded(.down))
                do {
                    var removed = 0
                    // Batch after batch while they come back full: one round clears a backlog.
                    while !Task.isCancelled {
                        let count = try await store.pruneExpired(now: now, limit: configuration.batch)
                        removed += count
                        if count < configuration.batch { break }
                    }
                    if removed > 0 { logger.debug("postgres.pruned", metadata: ["rows": "\(removed)"]) }
                } catch {
                    logger.debug("postgres.prune_failed", metadata: ["error": "\(error)"])
                }
            }
        }
    }
}
