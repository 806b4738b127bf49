import KeyholeStore
import Synchronization

/// Hands completed `PendingAnswer`s to one event loop (SwiftNIO's or a `SocketLoop`): the first answer of a burst schedules one task,
/// which runs every answer queued by then. A sync that completes fifty changes costs the event loop
/// one wake-up and one task instead of fifty.
final class AnswerDelivery: Sendable {
    private typealias Item = (outcome: PendingAnswer.Outcome, receiver: PendingAnswer.Receiver)

    private let execute: @Sendable (@escaping @Sendable () -> Void) -> Void
    private let queue = Mutex<[Item]>([])
    /// The array the last drain ran, emptied with its room kept, swapped back in by the next drain:
    /// the deliverer (another thread) then appends into room this loop's thread allocated and
    /// frees, rather than allocating an array per burst that this thread frees, which costs both
    /// threads the allocator's lock (measured: a third of keyholed's lock waits on a cache miss).
    /// Only the loop's thread touches it, in `drain`.
    private nonisolated(unsafe) var spare: [Item] = []

    /// Delivers through `execute`, which runs its closure on the loop.
    init(execute: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) {
        self.execute = execute
    }

    /// Runs `receiver` with `outcome` on the event loop, after whatever it runs now.
    func deliver(_ outcome: PendingAnswer.Outcome, to receiver: @escaping PendingAnswer.Receiver) {
        let first = queue.withLock { queue in
            queue.append((outcome, receiver))
            return queue.count == 1
        }
        // In a burst of answers on this thread (a batch's), the loop is woken once, at its end.
        if first { CompletionBurst.wake { self.execute { self.drain() } } }
    }

    private func drain() {
        // Swapped out under the lock, run outside it: a receiver may queue more (they wait for the next task).
        var items = spare
        spare = []
        queue.withLock { swap(&items, &$0) }
        for item in items { item.receiver(item.outcome) }
        items.removeAll(keepingCapacity: true)
        spare = items
    }
}
