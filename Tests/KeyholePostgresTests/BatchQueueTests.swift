@testable import KeyholePostgres
import Testing

/// Which calls go to the database together, and on which connection (POSTGRES.md, "Cost per request").
@Suite("batch queue")
struct BatchQueueTests {
    @Test("a lone call goes at once; calls behind a batch wait for it and go together, up to the batch's limit, on its connection")
    func batches() {
        var queue = BatchQueue<Int>(slots: 2, maxBatch: 3, spill: 10)
        let first = queue.enqueue(1)
        #expect(first?.batch == [1])
        let slot = first?.slot ?? -1
        for call in 2...5 { #expect(queue.enqueue(call) == nil, "call \(call) went while a batch was out and fewer than the spill waited") }
        #expect(queue.waitingCount == 4 && queue.inFlight == 1)
        #expect(queue.finished(slot: slot) == [2, 3, 4])
        #expect(queue.finished(slot: slot) == [5])
        #expect(queue.finished(slot: slot) == nil)
        #expect(queue.inFlight == 0 && queue.waitingCount == 0)
        // Free again: the next lone call goes at once, on the connection last freed (the warm one).
        #expect(queue.enqueue(6)?.slot == slot)
    }

    @Test("a spill of waiting calls opens another connection; never more than there are")
    func spills() {
        var queue = BatchQueue<Int>(slots: 2, maxBatch: 4, spill: 3)
        let first = queue.enqueue(0)
        #expect(queue.enqueue(1) == nil && queue.enqueue(2) == nil)
        let second = queue.enqueue(3)
        #expect(second?.batch == [1, 2, 3] && second?.slot != first?.slot)
        #expect(queue.inFlight == 2)
        for call in 4...9 { #expect(queue.enqueue(call) == nil, "a third connection opened") }
        #expect(queue.finished(slot: second?.slot ?? -1) == [4, 5, 6, 7])
        #expect(queue.finished(slot: first?.slot ?? -1) == [8, 9])
        #expect(queue.finished(slot: first?.slot ?? -1) == nil)
        #expect(queue.finished(slot: second?.slot ?? -1) == nil)
        #expect(queue.inFlight == 0)
    }
}
