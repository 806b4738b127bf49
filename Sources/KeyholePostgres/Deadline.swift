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
        // The bound and the once-only answer are a `PendingCall`'s; its expiry also cancels the work.
        let work = Mutex<Task<Void, Never>?>(nil)
        let call = PendingCall<Void, Value>((), within: limit, doing: doing, completion: completion) { work.withLock { $0 }?.cancel() }
        let task = Task {
            do {
                call.answer(.success(try await body()))
            } catch {
                call.answer(.failure(PostgresStoreError.from(error, doing: doing)))
            }
        }
        work.withLock { $0 = task }
        // The bound may have passed before the task was known: cancel it now (harmless once it ended).
        if call.isAnswered { task.cancel() }
        return task
    }
}