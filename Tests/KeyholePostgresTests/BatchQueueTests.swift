@testable import KeyholePostgres
import Testing

/// Which calls go to the database together, and on which connection (POSTGRES.md, "Cost per request").
@Suite("batch queue")
struct BatchQueueTests {
    @Test("a lone call starts a connection; calls behind a batch wait for it and go together, up to the batch's limit, on its connection")
    func batches() {
        var queue = BatchQueue<Int>(slots: 2, maxBatch: 3, spill: 10)
        let slot = queue.enqueue(1) ?? -1
        #expect(slot >= 0)
        // Calls that come before the connection takes its batch go with it.
        #expect(queue.enqueue(2) == nil)
        #expect(queue.next(slot: slot) == [1, 2])
        for call in 3...6 { #expect(queue.enqueue(call) == nil, "call \(call) started a connection while a batch was out and fewer than the spill waited") }
        #expect(queue.waitingCount == 4 && queue.inFlight == 1)
        #expect(queue.next(slot: slot) == [3, 4, 5])
        #expect(queue.next(slot: slot) == [6])
        #expect(queue.next(slot: slot) == nil)
        #expect(queue.inFlight == 0 && queue.waitingCount == 0)
        // Free again: the next lone call starts at once the connection last freed (the warm one).
        #expect(queue.enqueue(7) == slot)
    }

    @Test("a spill of waiting calls starts another connection, never more than there are; a connection started for calls another took is freed")
    func spills() {
        var queue = BatchQueue<Int>(slots: 2, maxBatch: 4, spill: 3)
        let first = queue.enqueue(0) ?? -1
        #expect(queue.next(slot: first) == [0])
        #expect(queue.enqueue(1) == nil && queue.enqueue(2) == nil)
        let second = queue.enqueue(3) ?? -1
        #expect(second >= 0 && second != first)
        #expect(queue.inFlight == 2)
        for call in 4...9 { #expect(queue.enqueue(call) == nil, "a third connection started") }
        #expect(queue.next(slot: first) == [1, 2, 3, 4])
        #expect(queue.next(slot: first) == [5, 6, 7, 8])
        #expect(queue.next(slot: first) == [9])
        // The second connection, started for calls the first took: nothing left, so free again.
        #expect(queue.next(slot: second) == nil)
        #expect(queue.next(slot: first) == nil)
        #expect(queue.inFlight == 0)
    }
}
