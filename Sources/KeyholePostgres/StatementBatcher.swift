import KeyholeStore
import NIOCore
import PostgresNIO
import Synchronization

/// What `StatementBatcher` sends: one statement, prepared once per connection, run for a batch of
/// calls, each answered from the rows. On the connection's event loop, without tasks.
protocol BatchRunner: Sendable {
    associatedtype Entry: BatchEntry
    /// The statement, naming no schema (the connection's `search_path` is the schema).
    static var sql: String { get }
    /// Runs `batch` through `statement`. The future's value answers the calls that its rows have
    /// not answered already: the batcher calls it once the next batch is sent, so that PostgreSQL
    /// works on that one while these are answered. A failure of the whole batch is the future's
    /// (the batcher then answers every call with it).
    func run(_ batch: [Entry], through statement: PreparedQuery, on eventLoop: any EventLoop) -> EventLoopFuture<BatchAnswers>
}

/// What answers a batch's calls from its rows, on the connection's event loop.
typealias BatchAnswers = @Sendable () -> Void

/// A call waiting in a batch.
protocol BatchEntry: Sendable {
    /// Whether the call has its answer already (its bound passed while it waited): left out of the
    /// batch it would have gone in.
    var isAnswered: Bool { get }
    /// Answers the call with `error`, unless it has its answer already.
    func fail(_ error: PostgresStoreError)
}

/// Calls of one kind gathered into batches (`BatchQueue`) on connections of their own
/// (`BatchConnection`, POSTGRES.md "Cost per request"). A batch runs on its connection's event loop,
/// and that connection takes the next batch as soon as this one's rows are in, on the same loop,
/// before they are read and answered.
final class StatementBatcher<Runner: BatchRunner>: Sendable {
    typealias Entry = Runner.Entry

    private let queue: Mutex<BatchQueue<Entry>>
    private let connections: [BatchConnection]
    /// A batch's bound: past it, its connection is closed.
    private let bound: TimeAmount
    private let doing: String
    private let batchesSent = Atomic<Int>(0)
    private let callsSent = Atomic<Int>(0)

    init(connections: [BatchConnection], maxBatch: Int, spill: Int, bound: Duration, doing: String) {
        precondition(!connections.isEmpty, "a batcher needs a connection")
        self.connections = connections
        self.bound = TimeAmount(bound)
        self.doing = doing
        queue = Mutex(BatchQueue(slots: connections.count, maxBatch: maxBatch, spill: spill))
    }

    /// Batches and calls sent since the start (their ratio is the mean batch): for `stats`.
    var sent: (batches: Int, calls: Int) { (batchesSent.load(ordering: .relaxed), callsSent.load(ordering: .relaxed)) }

    /// Sends `entry` with the next batch (at once if a connection is free), which `runner` runs.
    /// (The runner is handed in rather than kept: it refers to the store that keeps this.)
    func submit(_ entry: Entry, to runner: Runner) {
        let started = queue.withLock { queue -> BatchQueue<Entry>.Enqueued in
            switch queue.enqueue(entry) {
            case .full:
                // Calls answered already (their bound passed while PostgreSQL was slow or gone)
                // make room first.
                queue.dropWaiting { $0.isAnswered }
                return queue.enqueue(entry)
            case let enqueued: return enqueued
            }
        }
        let slot: Int
        switch started {
        case .full: return entry.fail(.unavailable("\(doing): \(BatchQueue<Entry>.waitingLimit) calls wait for PostgreSQL already"))
        case .waiting: return
        case .start(let started): slot = started
        }
        // The batch is taken on the connection's event loop, not here: the calls that come while
        // it wakes go with this one.
        connections[slot].eventLoop.execute { self.runNext(on: slot, runner) }
    }

    /// Closes every connection; calls submitted afterwards fail at once.
    func shutDown() async {
        for connection in connections { try? await connection.shutDown().get() }
    }

    /// Runs the calls waiting on connection `slot`, then whatever waits after them. On that
    /// connection's event loop.
    private func runNext(on slot: Int, _ runner: Runner) {
        let connection = connections[slot]
        var live: [Entry] = []
        while live.isEmpty {
            guard let next = queue.withLock({ $0.next(slot: slot) }) else { return }
            live = next.filter { !$0.isAnswered }
        }
        let batch = live
        batchesSent.add(1, ordering: .relaxed)
        callsSent.add(batch.count, ordering: .relaxed)
        let doing = self.doing, eventLoop = connection.eventLoop
        // The batch ends at its bound whatever it waits for (making the connection included): its
        // connection is given up, and the next batch goes on a new one.
        let ended = eventLoop.makePromise(of: BatchAnswers.self)
        let overrun = eventLoop.scheduleTask(in: bound) {
            connection.abandon()
            ended.fail(PostgresStoreError.unavailable("\(doing): no answer within \(self.bound)"))
        }
        connection.statement().flatMap { statement in
            runner.run(batch, through: statement, on: eventLoop)
        }.cascade(to: ended)
        ended.futureResult.whenComplete { result in
            overrun.cancel()
            switch result {
            case .success(let answers):
                // The next batch first: its statement is on its way to PostgreSQL before this
                // batch's calls are answered, rather than PostgreSQL waiting for them.
                self.runNext(on: slot, runner)
                // Each client's loop woken once for the batch (`CompletionBurst`).
                CompletionBurst.run { answers() }
            case .failure(let error):
                let failure = PostgresStoreError.from(error, doing: doing)
                CompletionBurst.run { for call in batch { call.fail(failure) } }
                self.runNext(on: slot, runner)
            }
        }
    }
}
