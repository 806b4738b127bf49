import Synchronization

/// Every database call is bounded (`[postgres] timeout`, POSTGRES.md "PostgreSQL unreachable"): the
/// call races a timer, and whichever ends first decides. Past its bound the call is `unavailable`
/// and the caller goes on at once: the call is cancelled, but not waited for (a task group would
/// wait for it, and a call stuck on a frozen server may not notice its cancellation for long).
enum Deadline {
    static func run<Value: Sendable>(
        within limit: Duration, doing: String, _ body: @escaping @Sendable () async throws -> Value
    ) async throws(PostgresStoreError) -> Value {
        let outcome = OneOutcome<Value>()
        let result: Result<Value, any Error> = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<Value, any Error>, Never>) in
                outcome.start(continuation)
                let work = Task {
                    do {
                        outcome.finish(.success(try await body()))
                    } catch {
                        outcome.finish(.failure(error))
                    }
                }
                let timer = Task {
                    try? await Task.sleep(for: limit)
                    outcome.finish(.failure(PostgresStoreError.unavailable("\(doing): no answer within \(limit)")))
                }
                outcome.onFinish {
                    work.cancel()
                    timer.cancel()
                }
            }
        } onCancel: {
            outcome.finish(.failure(CancellationError()))
        }
        do {
            return try result.get()
        } catch {
            throw PostgresStoreError.from(error, doing: doing)
        }
    }
}

/// The first of several outcomes, handed to one continuation; the later ones are dropped.
private final class OneOutcome<Value: Sendable>: Sendable {
    private struct State {
        var continuation: CheckedContinuation<Result<Value, any Error>, Never>?
        var early: Result<Value, any Error>?
        var finished = false
        var onFinish: (@Sendable () -> Void)?
    }

    private let state = Mutex(State())

    func start(_ continuation: CheckedContinuation<Result<Value, any Error>, Never>) {
        let early = state.withLock { state -> Result<Value, any Error>? in
            if let early = state.early { return early }
            state.continuation = continuation
            return nil
        }
        if let early { continuation.resume(returning: early) }
    }

    func onFinish(_ action: @escaping @Sendable () -> Void) {
        let now = state.withLock { state -> Bool in
            if state.finished { return true }
            state.onFinish = action
            return false
        }
        if now { action() }
    }

    func finish(_ result: Result<Value, any Error>) {
        let (continuation, action) = state.withLock { state -> (CheckedContinuation<Result<Value, any Error>, Never>?, (@Sendable () -> Void)?) in
            guard !state.finished else { return (nil, nil) }
            state.finished = true
            defer { state.onFinish = nil }
            guard let continuation = state.continuation else {
                state.early = result
                return (nil, state.onFinish)
            }
            state.continuation = nil
            return (continuation, state.onFinish)
        }
        continuation?.resume(returning: result)
        action?()
    }
}
