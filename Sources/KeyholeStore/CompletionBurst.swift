#if canImport(Glibc)
import Glibc
#endif

/// Answers completed in a burst on one thread (a batch of database rows answered on its connection's
/// event loop) wake each thread they go to once, at the burst's end, instead of once per answer.
///
/// The receiving side (an answer delivery to a client's loop) wakes its loop for the first answer
/// it queues; that loop, on the other core, often drains the queue before the next answer comes,
/// so a batch of 8 answers woke it 3 or 4 times, each an `eventfd` write here and an `epoll_wait`
/// return there (measured on a cache miss: about 12 000 writes a second for 3 000 batches). In a
/// burst, such a wake is deferred (`wake(_:)`) and run when the burst ends (`run(_:)`).
///
/// Per thread: a burst covers what its body does on the calling thread only.
public enum CompletionBurst {
    /// The calling thread's bursts: how deep, and the wakes deferred.
    private final class Pending {
        var depth = 0
        var wakes: [() -> Void] = []
    }

    private static let key: pthread_key_t = {
        var key = pthread_key_t()
        let created = pthread_key_create(&key) { pointer in
            // The thread's Pending, retained when it was set (never nil: glibc calls this for set values only).
            if let pointer { Unmanaged<AnyObject>.fromOpaque(pointer).release() }
        }
        precondition(created == 0, "pthread_key_create failed")
        return key
    }()

    /// The calling thread's, if it has ever been in a burst.
    private static var existing: Pending? {
        pthread_getspecific(key).map { Unmanaged<Pending>.fromOpaque($0).takeUnretainedValue() }
    }

    private static var current: Pending {
        if let existing { return existing }
        let pending = Pending()
        let set = pthread_setspecific(key, Unmanaged.passRetained(pending).toOpaque())
        precondition(set == 0, "pthread_setspecific failed")
        return pending
    }

    /// Runs `body` as a burst: the wakes asked for in it (`wake(_:)`) run once it returns, in the
    /// order they were asked for. Nested bursts end with the outermost.
    public static func run<Result>(_ body: () throws -> Result) rethrows -> Result {
        let pending = current
        pending.depth += 1
        defer {
            pending.depth -= 1
            if pending.depth == 0, !pending.wakes.isEmpty {
                // Swapped out (a wake may ask for more: run at once, the burst being over), and
                // back in emptied with its room kept.
                var wakes: [() -> Void] = []
                swap(&wakes, &pending.wakes)
                for wake in wakes { wake() }
                wakes.removeAll(keepingCapacity: true)
                if pending.wakes.isEmpty { swap(&wakes, &pending.wakes) }
            }
        }
        return try body()
    }

    /// Runs `wake` now, or at the end of the burst the calling thread is in.
    public static func wake(_ wake: @escaping () -> Void) {
        guard let pending = existing, pending.depth > 0 else { return wake() }
        pending.wakes.append(wake)
    }
}
