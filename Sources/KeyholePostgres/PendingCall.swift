import Synchronization

/// A call waiting for the database (a cache miss, a session.create) that `StatementBatcher` sends in
/// a batch: its request, and its answer, handed to `completion` exactly once, from any thread:
/// the batch's outcome, or `unavailable` when its bound passes first (`DeadlineWheel`), counted from
/// when the call was asked, wherever it is then (waiting for a batch, or in one).
final class PendingCall<Request: Sendable, Value: Sendable>: BatchEntry {
    let request: Request
    private let completion: @Sendable (Result<Value, PostgresStoreError>) -> Void
    private let answered = Atomic(false)
    /// The wheel's entry for the bound (0: not known yet).
    private let timer = Atomic<UInt64>(0)

    /// `expired`, if any, runs when the bound passes (after the call is answered `unavailable`,
    /// unless it had its answer already).
    init(
        _ request: Request, within limit: Duration, doing: String,
        completion: @escaping @Sendable (Result<Value, PostgresStoreError>) -> Void, expired: (@Sendable () -> Void)? = nil
    ) {
        self.request = request
        self.completion = completion
        let id = DeadlineWheel.shared.add(deadline: .now + limit) { [self] in
            answer(.failure(.unavailable("\(doing): no answer within \(limit)")))
            expired?()
        }
        timer.store(id, ordering: .releasing)
        // Answered before its timer was known: forget the timer now.
        if isAnswered { DeadlineWheel.shared.cancel(id) }
    }

    var isAnswered: Bool { answered.load(ordering: .acquiring) }

    func fail(_ error: PostgresStoreError) { answer(.failure(error)) }

    /// Answers the call, unless it has its answer already.
    func answer(_ outcome: Result<Value, PostgresStoreError>) {
        guard answered.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
        completion(outcome)
        let id = timer.load(ordering: .acquiring)
        if id != 0 { DeadlineWheel.shared.cancel(id) }
    }
}
