import KeyholeStore
import Synchronization

/// Hands completed `PendingAnswer`s to one event loop (SwiftNIO's or a `SocketLoop`): the first answer of a burst schedules one task,
/// which runs every answer queued by then. A sync that completes fifty changes costs the event loop
/// one wake-up and one task instead of fifty.
final class AnswerDelivery: Sendable {
    private typealias Item = (outcome: PendingAnswer.Outcome, receiver: PendingAnswer.Receiver, source: PendingAnswer)

    private let execute: @Sendable (@escaping @Sendable () -> Void) -> Void
    private let queue = Mutex<[Item]>([])
    /// The queue's other array: the two alternate, each emptied with its room kept, so that neither
    /// is freed. Before, each burst's array was grown by the deliverer (another thread) and freed by
    /// this loop's, which costs both threads the allocator's lock (measured: about a tenth of
    /// keyholed's lock waits on a cache miss). Only `drain` touches it, and drains never overlap (`init`).
    private nonisolated(unsafe) var spare: [Item] = []

    /// Delivers through `execute`, which must run its closures one at a time on the loop's one
    /// thread, never inline (SocketLoop's and SwiftNIO's `execute` both queue): `drain` relies on it.
    init(execute: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void) {
        self.execute = execute
    }

    /// Runs `receiver` with `outcome` on the event loop, after whatever it runs now.
    func deliver(_ outcome: PendingAnswer.Outcome, to receiver: @escaping PendingAnswer.Receiver, from source: PendingAnswer) {
        let first = queue.withLock { queue in
            queue.append((outcome, receiver, source))
            return queue.count == 1
        }
        // In a burst of answers on this thread (a batch's), the loop is woken once, at its end. An
        // answer another thread delivers meanwhile waits for that end too, and the batch's first
        // answer for its last: fewer wake-ups for a little latency (POSTGRES.md, "Two threads").
        if first { CompletionBurst.wake { self.execute { self.drain() } } }
    }

    private func drain() {
        // Swapped out under the lock, run outside it: a receiver may queue more (they wait for the next task).
        var items = spare
        spare = []
        queue.withLock { swap(&items, &$0) }
        for item in items {
            item.receiver(item.outcome)
            // An answer's unused room is freed here, on the thread that allocated it.
            item.source.dropRoom()
        }
        items.removeAll(keepingCapacity: true)
        spare = items
    }
}
