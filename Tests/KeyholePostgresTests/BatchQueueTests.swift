@testable import KeyholePostgres
import Testing

/// Which calls go to the database together, and on which connection (POSTGRES.md, "Cost per request").
@Suite("batch queue")
struct BatchQueueTests {
    @Test("a lone call starts a connection; calls behind a batch wait for it and go together, up to the batch's limit, on its connection")
    func batches() {
        var queue = BatchQueue<Int>(slots: 2, maxBatch: 3, spill: 10)
        guard case .start(let slot) = queue.enqueue(1) else { Issue.record("a lone call did not start a connection"); return }
        // Calls that come before the connection takes its batch go with it.
        #expect(queue.enqueue(2) == .waiting)
        #expect(queue.next(slot: slot) == [1, 2])
        for call in 3...6 { #expect(queue.enqueue(call) == .waiting, "call \(call) started a connection while a batch was out and fewer than the spill waited") }
        #expect(queue.waitingCount == 4 && queue.inFlight == 1)
        #expect(queue.next(slot: slot) == [3, 4, 5])
        #expect(queue.next(slot: slot) == [6])
        #expect(queue.next(slot: slot) == nil)
        #expect(queue.inFlight == 0 && queue.waitingCount == 0)
        // Free again: the next lone call starts at once the connection last freed (the warm one).
        #expect(queue.enqueue(7) == .start(slot))
    }

    @Test("a spill of waiting calls starts another connection, never more than there are; a connection started for calls another took is freed")
    func spills() {
        var queue = BatchQueue<Int>(slots: 2, maxBatch: 4, spill: 3)
        guard case .start(let first) = queue.enqueue(0) else { Issue.record("a lone call did not start a connection"); return }
        #expect(queue.next(slot: first) == [0])
        #expect(queue.enqueue(1) == .waiting && queue.enqueue(2) == .waiting)
        guard case .start(let second) = queue.enqueue(3) else { Issue.record("the spill did not start another connection"); return }
        #expect(second != first)
        #expect(queue.inFlight == 2)
        for call in 4...9 { #expect(queue.enqueue(call) == .waiting, "a third connection started") }
        #expect(queue.next(slot: first) == [1, 2, 3, 4])
        #expect(queue.next(slot: first) == [5, 6, 7, 8])
        #expect(queue.next(slot: first) == [9])
        // The second connection, started for calls the first took: nothing left, so free again.
        #expect(queue.next(slot: second) == nil)
        #expect(queue.next(slot: first) == nil)
        #expect(queue.inFlight == 0)
    }

    @Test("at most waitingLimit calls wait: the next is refused at once, until answered ones are dropped")
    func limit() {
        var queue = BatchQueue<Int>(slots: 1, maxBatch: 64, spill: 64)
        guard case .start = queue.enqueue(-1) else { Issue.record("a lone call did not start a connection"); return }
        for call in 0..<BatchQueue<Int>.waitingLimit - 1 { #expect(queue.enqueue(call) == .waiting) }
        #expect(queue.waitingCount == BatchQueue<Int>.waitingLimit)
        #expect(queue.enqueue(99_999) == .full)
        queue.dropWaiting { $0 < 100 }
        #expect(queue.waitingCount == BatchQueue<Int>.waitingLimit - 101)
        #expect(queue.enqueue(99_999) == .waiting)
    }
}
