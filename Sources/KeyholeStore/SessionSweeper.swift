import Logging
import ServiceLifecycle

/// Frees the memory of expired sessions now and then. Expired sessions are refused on sight anyway;
/// this only bounds memory. Sweeps in slices so the lock is never held long.
public struct SessionSweeper: Service {
    /// How often and how much.
    public struct Configuration: Sendable {
        /// Time between sweeps.
        public var interval: Duration = .seconds(60)
        /// Slots looked at per lock hold.
        public var slice = 16_384

        /// The defaults.
        public init() {}
    }

    private let store: Store
    private let configuration: Configuration
    private let now: @Sendable () -> Int64
    private let logger: Logger

    /// A sweeper for `store`, with `now` the wall clock in seconds.
    public init(store: Store, configuration: Configuration = Configuration(), now: @escaping @Sendable () -> Int64, logger: Logger) {
        self.store = store
        self.configuration = configuration
        self.now = now
        self.logger = logger
    }

    /// Sweeps every `interval` until graceful shutdown.
    public func run() async {
        while !Task.isCancelled && !Task.isShuttingDownGracefully {
            do {
                try await cancelWhenGracefulShutdown { try await Task.sleep(for: configuration.interval) }
            } catch {
                return
            }
            let removed = await sweepOnce()
            if removed > 0 { logger.debug("sessions.swept", metadata: ["removed": "\(removed)"]) }
        }
    }

    /// One pass over every slot; returns how many sessions it removed.
    public func sweepOnce() async -> Int {
        let time = now()
        var cursor = 0
        var removed = 0
        repeat {
            let (count, next) = store.sweepExpired(now: time, from: cursor, limit: configuration.slice)
            removed += count
            cursor = next
            await Task.yield()
        } while cursor != 0
        return removed
    }
}
