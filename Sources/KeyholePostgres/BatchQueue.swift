import NIOCore

/// Which calls of one kind go to the database together, and on which of the kind's connections
/// (POSTGRES.md, "Cost per request"): a call starts a free connection (or waits), and a connection
/// started or whose batch ended takes every waiting call, up to `maxBatch`. No I/O and no clock:
/// `StatementBatcher` drives it under its lock.
struct BatchQueue<Entry> {
    /// Calls in one batch at most.
    let maxBatch: Int
    let slots: Int
    /// Calls waiting that open another connection while one has a batch out.
    let spill: Int
    private var waiting = CircularBuffer<Entry>()
    /// The connections with no batch, the last freed on top (its connection is the likeliest to be
    /// warm).
    private var free: [Int]

    init(slots: Int, maxBatch: Int, spill: Int) {
        precondition(slots > 0 && maxBatch > 0 && spill > 0, "a batch queue needs room for one batch of one call")
        self.slots = slots
        self.maxBatch = maxBatch
        self.spill = spill
        free = Array((0..<slots).reversed())
    }

    /// Calls waiting for a batch.
    var waitingCount: Int { waiting.count }

    /// Batches out now.
    var inFlight: Int { slots - free.count }

    /// Adds a call: the connection to start now, or `nil` (the call waits for one that is out). A
    /// connection is started only when none has a batch out, or when a `spill` of calls waits: so
    /// a lone call goes at once, and under load batches grow with it rather than spreading thin
    /// over every connection (each batch costs a round of thread wake-ups in keyholed and a
    /// statement in PostgreSQL, whatever its size).
    mutating func enqueue(_ entry: Entry) -> Enqueued {
        guard waiting.count < Self.waitingLimit else { return .full }
        waiting.append(entry)
        guard free.count == slots || waiting.count >= spill, let slot = free.popLast() else { return .waiting }
        return .start(slot)
    }

    /// What `enqueue` did with a call.
    enum Enqueued: Equatable {
        /// Start this connection: it takes the call with its batch.
        case start(Int)
        /// The call waits for a connection that has a batch out.
        case waiting
        /// Not taken: `waitingLimit` calls wait already.
        case full
    }

    /// Calls waiting at most: past it a call is refused at once rather than kept (while PostgreSQL
    /// is slow or gone, and the calls waiting are answered by their bounds, memory must not grow
    /// with the request rate).
    static var waitingLimit: Int { 4096 }

    /// Drops the waiting calls `answered` says have their answer already.
    mutating func dropWaiting(where answered: (Entry) -> Bool) {
        waiting.removeAll(where: answered)
    }

    /// The batch to send on `slot`, a connection started or whose batch ended: every call waiting
    /// then, up to `maxBatch` (so the calls that came while the connection was being started go
    /// with it too); `nil` when none waits, and the connection is free again.
    mutating func next(slot: Int) -> [Entry]? {
        precondition(slot >= 0 && slot < slots && !free.contains(slot), "a batch asked for on a connection that was not started")
        guard !waiting.isEmpty else {
            free.append(slot)
            return nil
        }
        return take()
    }

    private mutating func take() -> [Entry] {
        let count = min(waiting.count, maxBatch)
        var batch: [Entry] = []
        batch.reserveCapacity(count)
        for _ in 0..<count { batch.append(waiting.removeFirst()) }
        return batch
    }
}
