import NIOCore
import Synchronization

/// Runs `body` bounded as a whole by `timeout`: for calls whose own timeouts do not bound them whole
/// (AsyncHTTPClient's covers a response's head only, and a server trickling its body a byte at a time
/// must not hold a request for longer; a PostgreSQL call may wait on a frozen server).
///
/// On timeout or cancellation the answer (`timedOut()`, `cancelled()`) comes at once and `body`'s task
/// is cancelled but not waited for: a call that does not notice cancellation promptly may linger
/// until its own I/O ends it. (Here, below every target that needs it.)
package func withDeadline<Value: Sendable, Failure: Error>(
    _ timeout: TimeAmount,
    timedOut: @escaping @Sendable () -> Failure,
    cancelled: @escaping @Sendable () -> Failure,
    _ body: @escaping @Sendable () async throws(Failure) -> Value
) async throws(Failure) -> Value {
    // The first outcome wins: the body's, the timer's or cancellation's.
    let race = FirstOutcome<Result<Value, Failure>>()
    let finish = race.finish
    let work = Task {
        do throws(Failure) {
            finish(.success(try await body()))
        } catch {
            finish(.failure(error))
        }
    }
    let timer = Task {
        guard (try? await Task.sleep(for: .nanoseconds(timeout.nanoseconds))) != nil else { return }
        finish(.failure(timedOut()))
        work.cancel()
    }
    let result = await withTaskCancellationHandler {
        await race.wait()
    } onCancel: {
        work.cancel()
        finish(.failure(cancelled()))
    }
    timer.cancel()
    return try result.get()
}

/// The first of several outcomes, handed to one waiter; the outcome may come before or after the wait.
package final class FirstOutcome<Value: Sendable>: Sendable {
    private let state = Mutex<(continuation: CheckedContinuation<Value, Never>?, value: Value?)>((nil, nil))

    package init() {}

    /// Records `value` unless an outcome came first, and resumes the waiter if there is one.
    @Sendable package func finish(_ value: Value) {
        state.withLock { state -> CheckedContinuation<Value, Never>? in
            guard state.value == nil else { return nil }
            state.value = value
            defer { state.continuation = nil }
            return state.continuation
        }?.resume(returning: value)
    }

    /// The first outcome, once there is one.
    package func wait() async -> Value {
        await withCheckedContinuation { continuation in
            let early = state.withLock { state -> Value? in
                if state.value == nil { state.continuation = continuation }
                return state.value
            }
            if let early { continuation.resume(returning: early) }
        }
    }
}
