import KeyholeProtocol
import KeyholeStore
import NIOCore
import Synchronization

/// Turns a store change into an operation's outcome: answered inline when the change needed no write
/// (its completion ran at once), else when the committer calls back, through a promise (no task). The
/// committer's thread builds the answer and completes the promise with it: one promise per change, and
/// less work on the event loop.
final class StoreCommit: Sendable {
    private enum State {
        case waiting
        case completed(Result<Void, StoreError>)
        case promised(EventLoopPromise<[String: JSONValue]>, @Sendable () -> [String: JSONValue])
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
        let promise = commit.state.withLock { state -> EventLoopPromise<[String: JSONValue]>? in
            guard case .waiting = state else { return nil }
            let promise = eventLoop.makePromise(of: [String: JSONValue].self)
            state = .promised(promise, { answer(value) })
            return promise
        }
        guard let promise else {
            guard case .completed(let result) = commit.state.withLock({ $0 }) else { return .done(answer(value)) }
            if case .failure(let error) = result { throw protocolError(error) }
            return .done(answer(value))
        }
        return .future(promise.futureResult)
    }

    private func complete(_ result: Result<Void, StoreError>) {
        let promised = state.withLock { state -> (EventLoopPromise<[String: JSONValue]>, @Sendable () -> [String: JSONValue])? in
            if case .promised(let promise, let answer) = state { return (promise, answer) }
            state = .completed(result)
            return nil
        }
        guard let (promise, answer) = promised else { return }
        switch result {
        case .success: promise.succeed(answer())
        case .failure(let error): promise.fail(Self.protocolError(error))
        }
    }

    /// The protocol's view of a store failure: whatever the cause, the change did not happen.
    static func protocolError(_ error: StoreError) -> ProtocolError {
        .storageUnavailable(error.message)
    }
}
