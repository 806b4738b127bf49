import KeyholeProtocol
import KeyholeStore
import Synchronization

extension StoreCommit {
    /// Runs `change` and returns its value once the change is durable (or needed no write), for
    /// operations that already run in a task.
    static func awaiting<Value: Sendable>(
        _ change: (@escaping Store.Completion) throws(StoreError) -> Value
    ) async throws(ProtocolError) -> Value {
        let completion = AsyncCompletion()
        let value: Value
        do {
            value = try change { completion.complete($0) }
        } catch {
            throw protocolError(error)
        }
        if case .failure(let error) = await completion.wait() { throw protocolError(error) }
        return value
    }
}

/// A completion that may come before or after someone waits for it.
private final class AsyncCompletion: Sendable {
    private let state = Mutex<(result: Result<Void, StoreError>?, waiter: CheckedContinuation<Result<Void, StoreError>, Never>?)>((nil, nil))

    func complete(_ result: Result<Void, StoreError>) {
        state.withLock { state -> CheckedContinuation<Result<Void, StoreError>, Never>? in
            guard state.result == nil else { return nil }
            state.result = result
            defer { state.waiter = nil }
            return state.waiter
        }?.resume(returning: result)
    }

    func wait() async -> Result<Void, StoreError> {
        await withCheckedContinuation { continuation in
            let early = state.withLock { state -> Result<Void, StoreError>? in
                if state.result == nil { state.waiter = continuation }
                return state.result
            }
            if let early { continuation.resume(returning: early) }
        }
    }
}
