import KeyholeProtocol
import KeyholeStore
import Synchronization

/// Turns a store change into an operation's outcome: answered inline when the change needed no write
/// (its completion ran at once), else when the committer calls back, through a `PendingAnswer`. The
/// committer's thread builds the answer, which then reaches the event loop with the others of its sync.
final class StoreCommit: Sendable {
    private enum State {
        case waiting
        case completed(Result<Void, StoreError>)
        case pending(PendingAnswer, @Sendable () -> PendingAnswer.Answer)
    }

    private let state = Mutex(State.waiting)

    /// Runs `change` with a completion, then builds the answer from its result with `answer`.
    static func run<Value>(
        _ change: (@escaping Store.Completion) throws(StoreError) -> Value,
        answer: @escaping @Sendable (Value) -> PendingAnswer.Answer
    ) throws(ProtocolError) -> Operation.Outcome where Value: Sendable {
        let commit = StoreCommit()
        let value: Value
        do {
            value = try change { commit.complete($0) }
        } catch {
            throw protocolError(error)
        }
        let pending = commit.state.withLock { state -> PendingAnswer? in
            guard case .waiting = state else { return nil }
            let pending = PendingAnswer()
            state = .pending(pending, { answer(value) })
            return pending
        }
        if let pending { return .pending(pending) }
        if case .completed(.failure(let error)) = commit.state.withLock({ $0 }) { throw protocolError(error) }
        switch answer(value) {
        case .object(let result): return .done(result)
        case .encoded(let result): return .encoded(result)
        }
    }

    private func complete(_ result: Result<Void, StoreError>) {
        let pending = state.withLock { state -> (PendingAnswer, @Sendable () -> PendingAnswer.Answer)? in
            if case .pending(let pending, let answer) = state { return (pending, answer) }
            state = .completed(result)
            return nil
        }
        guard let (pending, answer) = pending else { return }
        switch result {
        case .success: pending.complete(.success(answer()))
        case .failure(let error): pending.complete(.failure(Self.protocolError(error)))
        }
    }

    /// The protocol's view of a store failure: whatever the cause, the change did not happen.
    static func protocolError(_ error: StoreError) -> ProtocolError {
        .storageUnavailable(error.message)
    }
}
