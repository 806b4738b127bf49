import KeyholeProtocol
import NIOCore
import Synchronization

/// Every database call is bounded (`[postgres] timeout`, POSTGRES.md "PostgreSQL unreachable"): past
/// its bound the call is `unavailable` and the caller goes on at once; the call is cancelled but not
/// waited for (one stuck on a frozen server may not notice its cancellation for long). As the
/// project's `withDeadline`, with the timer kept on the shared `DeadlineWheel` rather than a sleeping
/// task per call.
enum Deadline {
    static func run<Value: Sendable>(
        within limit: Duration, doing: String, _ body: @escaping @Sendable () async throws -> Value
    ) async throws(PostgresStoreError) -> Value {
        // The first outcome wins: the call's, the wheel's or the caller's cancellation.
        let race = FirstOutcome<Result<Value, PostgresStoreError>>()
        let work = start(within: limit, doing: doing, body, race.finish)
        let result = await withTaskCancellationHandler {
            await race.wait()
        } onCancel: {
            work.cancel()
            race.finish(.failure(.from(CancellationError(), doing: doing)))
        }
        return try result.get()
    }

    /// `run`, with the outcome handed to `completion` (exactly once, from any thread) instead of
    /// awaited: one task for the call, and nothing waiting for it. Returns the call's task.
    @discardableResult
    static func start<Value: Sendable>(
        within limit: Duration, doing: String, _ body: @escaping @Sendable () async throws -> Value,
        _ completion: @escaping @Sendable (Result<Value, PostgresStoreError>) -> Void
    ) -> Task<Void, Never> {
        let once = Atomic(false)
        let finish: @Sendable (Result<Value, PostgresStoreError>) -> Void = { outcome in
            guard once.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged else { return }
            completion(outcome)
        }
        let timer = Mutex<UInt64?>(nil)
        let work = Task {
            let outcome: Result<Value, PostgresStoreError>
            do {
                outcome = .success(try await body())
            } catch {
                outcome = .failure(PostgresStoreError.from(error, doing: doing))
            }
            finish(outcome)
            if let id = timer.withLock({ $0 }) { DeadlineWheel.shared.cancel(id) }
        }
        let id = DeadlineWheel.shared.add(deadline: .now + limit) {
            finish(.failure(.unavailable("\(doing): no answer within \(limit)")))
            work.cancel()
        }
        timer.withLock { $0 = id }
        // The call may have ended before its timer was known: forget the timer now.
        if once.load(ordering: .acquiring) { DeadlineWheel.shared.cancel(id) }
        return work
    }
}
