import Foundation
import Synchronization

/// A store's `syncData` failpoint that, once armed, holds the next fdatasync: it says it started,
/// waits until released, then succeeds (a real fdatasync) or fails with EIO as the release says.
/// Unarmed, it is a plain fdatasync.
package final class HeldSync: Sendable {
    private let armed = Mutex(false)
    private let outcome = Mutex(true)
    private let entered = DispatchSemaphore(value: 0)
    private let released = DispatchSemaphore(value: 0)

    package init() {}

    /// Holds the next sync.
    package func arm() { armed.withLock { $0 = true } }

    /// Lets the held sync go on, succeeding or failing.
    package func release(succeeding: Bool) {
        outcome.withLock { $0 = succeeding }
        released.signal()
    }

    /// Blocks until a held sync has started (call it from a thread of the test's own).
    package func waitUntilEntered() { entered.wait() }

    /// Waits, off the cooperative pool, until a held sync has started.
    package func entry() async {
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                self.entered.wait()
                continuation.resume()
            }
        }
    }

    /// The failpoint, for `Store.Configuration.syncData`.
    package var syncData: @Sendable (Int32, Range<Int>) -> Bool {
        { fd, _ in
            let hold = self.armed.withLock { armed in
                defer { armed = false }
                return armed
            }
            guard hold else { return fdatasync(fd) == 0 }
            self.entered.signal()
            self.released.wait()
            guard self.outcome.withLock({ $0 }) else {
                errno = EIO
                return false
            }
            return fdatasync(fd) == 0
        }
    }
}
