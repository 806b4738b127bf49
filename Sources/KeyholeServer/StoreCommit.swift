import KeyholeProtocol
import KeyholeStore
import NIOCore
import Synchronization

/// Turns a store change into an operation's outcome: answered inline when the change needed no write
/// (its completion ran at once), else when the committer calls back, through a promise (no task).
final class StoreCommit: Sendable {
    private enum State {
        case waiting
        case completed(Result<Void, StoreError>)
        case promised(EventLoopPromise<Void>)
    }

    private let state = Mutex(State.waiting)

    /// Runs `change` with a completion, then builds the answer from its result with `answer`.
    static func run<Value>(
        on eventLoop: any EventLoop,
        _ change: (@escaping Store.Completion) throws(StoreError) -> Value,
        answer: @escaping @Sendable (Value) -> [String: JSONValue]
    ) throws(ProtocolError) -> Operation.Outcome where Value: Sendable {
        let commit = StoreCommit()
        let value: Value
        do {
            value = try change { commit.complete($0) }
        } catch {
            throw protocolError(error)
        }
        let promise = commit.state.withLock { state -> EventLoopPromise<Void>? in
            guard case .waiting = state else { return nil }
            let promise = eventLoop.makePromise(of: Void.self)
            state = .promised(promise)
            return promise
        }
        guard let promise else {
            guard case .completed(let result) = commit.state.withLock({ $0 }) else { return .done(answer(value)) }
            if case .failure(let error) = result { throw protocolError(error) }
            return .done(answer(value))
        }
        return .future(promise.futureResult.flatMapErrorThrowing { error in
            throw (error as? StoreError).map(protocolError) ?? error
        }.map { answer(value) })
    }

    private func complete(_ result: Result<Void, StoreError>) {
        let promise = state.withLock { state -> EventLoopPromise<Void>? in
            if case .promised(let promise) = state { return promise }
            state = .completed(result)
            return nil
        }
        guard let promise else { return }
        switch result {
        case .success: promise.succeed()
        case .failure(let error): promise.fail(error)
        }
    }

    /// The protocol's view of a store failure: whatever the cause, the change did not happen.
    static func protocolError(_ error: StoreError) -> ProtocolError {
        .storageUnavailable(error.message)
    }
}
