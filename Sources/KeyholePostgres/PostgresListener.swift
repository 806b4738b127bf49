import Logging
import PostgresNIO
import ServiceLifecycle
import Synchronization

/// The per-host cache's ears (POSTGRES.md, "Reads"): one connection of its own, outside the pool,
/// that LISTENs on the schema's channel and feeds what it hears to the store's cache, and a
/// heartbeat this host sends itself through the pool every `heartbeatInterval`. On every
/// (re)connection the cache is dropped and stays unused until a heartbeat comes back; when the
/// connection fails, the cache is unused until it is back (reconnecting with backoff, by itself).
public struct PostgresListener: Service {
    public struct Configuration: Sendable {
        /// How often this host sends itself a heartbeat: a quarter of `max_staleness` by default, so
        /// that one lost heartbeat does not yet make the view stale.
        public var heartbeatInterval: Duration = .milliseconds(500)
        /// The first wait before reconnecting; doubled after each failure up to `maximumBackoff`.
        public var firstBackoff: Duration = .milliseconds(100)
        public var maximumBackoff: Duration = .seconds(5)

        public init() {}
    }

    private let store: PostgresStore
    private let connection: PostgresConnection.Configuration
    private let configuration: Configuration
    private let logger: Logger

    /// A listener for `store`'s cache, connecting with `connection` (the pool's settings).
    public init(store: PostgresStore, connection: PostgresConnection.Configuration, configuration: Configuration = Configuration(), logger: Logger) {
        self.store = store
        self.connection = connection
        self.configuration = configuration
        self.logger = logger
    }

    public func run() async throws {
        await cancelWhenGracefulShutdown {
            var backoff = configuration.firstBackoff
            var connectionID = 0
            // Logged once per change of state, not once per attempt: nil before the first.
            let healthy = Mutex<Bool?>(nil)
            let logger = self.logger, channel = store.configuration.schema.channel
            while !Task.isCancelled {
                connectionID += 1
                let listened = Mutex(false)
                do {
                    try await listenOnce(id: connectionID) {
                        listened.withLock { $0 = true }
                        if healthy.withLock({ state in defer { state = true }; return state != true }) {
                            logger.notice("postgres.listening", metadata: ["channel": "\(channel)"])
                        }
                    }
                } catch {
                    if Task.isCancelled { break }
                    if healthy.withLock({ state in defer { state = false }; return state != false }) {
                        logger.warning("postgres.listener_lost", metadata: ["error": "\(PostgresStoreError.from(error, doing: "listening"))"])
                    }
                }
                store.cache.withLock { $0.listenerLost() }
                guard !Task.isCancelled else { break }
                if listened.withLock({ $0 }) { backoff = configuration.firstBackoff }
                try? await Task.sleep(for: backoff)
                backoff = min(backoff * 2, configuration.maximumBackoff)
            }
            store.cache.withLock { $0.listenerLost() }
        }
    }

    /// One connection's life: connect, LISTEN, then hear notifications and send heartbeats until the
    /// connection fails (thrown) or the task is cancelled.
    private func listenOnce(id: Int, connected: @escaping @Sendable () -> Void) async throws {
        let store = self.store, logger = self.logger, interval = configuration.heartbeatInterval
        // Bounded by the connection's own connect timeout (set from [postgres] timeout): a bound
        // from outside would leave a connection that completes late open and unused.
        let connection = try await PostgresConnection.connect(configuration: self.connection, id: id, logger: logger)
        do {
            try await connection.listen(on: store.configuration.schema.channel) { notifications in
                store.cache.withLock { $0.listenerConnected() }
                connected()
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask {
                        let host = store.configuration.hostID
                        for try await notification in notifications {
                            store.cache.withLock { $0.heard(notification: notification.payload, host: host) }
                        }
                        throw PostgresStoreError.unavailable("the listener's connection ended")
                    }
                    group.addTask {
                        let connectedAt = store.monotonic()
                        let silence = 2 * PostgresStore.seconds(store.configuration.maxStaleness)
                        while !Task.isCancelled {
                            let number = store.heartbeats.wrappingAdd(1, ordering: .relaxed).newValue
                            await Self.heartbeat(number, store: store, logger: logger)
                            // The uses recorded since the last beat, in one statement.
                            await store.writeTouches()
                            // Sending but not hearing: a connection dead without a reset (a partition)
                            // would otherwise keep the cache unused until TCP gives up. Reconnect.
                            let now = store.monotonic()
                            let heard = store.cache.withLock { $0.staleness(now: now) } ?? (now - connectedAt)
                            if heard > silence {
                                throw PostgresStoreError.unavailable("no heartbeat heard on the listener for \(Int(heard)) s")
                            }
                            try await Task.sleep(for: interval)
                        }
                    }
                    try await group.next()
                    group.cancelAll()
                }
            }
        } catch {
            try? await connection.close()
            throw error
        }
        try? await connection.close()
    }

    /// Sends heartbeat `number` through the pool. A failure is not the listener's: the heartbeat is
    /// simply not heard, and the view goes stale on its own.
    private static func heartbeat(_ number: UInt64, store: PostgresStore, logger: Logger) async {
        let payload = "h:\(store.configuration.hostID):\(number)"
        store.cache.withLock { $0.sent(heartbeat: number, at: store.monotonic()) }
        let channel = store.configuration.schema.channel
        do {
            _ = try await store.read("sending a heartbeat") { client in
                try await client.query("SELECT pg_notify(\(channel), \(payload))")
            }
        } catch {
            logger.debug("postgres.heartbeat_failed", metadata: ["error": "\(error)"])
        }
    }
}
