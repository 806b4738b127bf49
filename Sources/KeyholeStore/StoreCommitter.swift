import Logging
import ServiceLifecycle

/// The store's committer thread as a `Service`: started with the group, and on graceful shutdown it
/// writes and syncs what is queued before `run` returns. Put it before the server in the group, so that
/// the server (stopped first) drains its requests while commits still happen.
public struct StoreCommitter: Service {
    private let store: Store
    private let logger: Logger

    /// A committer for `store`.
    public init(store: Store, logger: Logger) {
        self.store = store
        self.logger = logger
    }

    /// Runs until graceful shutdown or cancellation, then flushes and returns.
    public func run() async {
        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await withCheckedContinuation { (finished: CheckedContinuation<Void, Never>) in
                    store.startCommitter(logger: logger) { finished.resume() }
                }
            } onGracefulShutdown: {
                store.stop()
            }
        } onCancel: {
            store.stop()
        }
        logger.debug("storage.committer_stopped")
    }
}
