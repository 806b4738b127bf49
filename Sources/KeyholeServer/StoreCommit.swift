import KeyholeProtocol
import KeyholeStore
import NIOCore
import Synchronization

/// Turns a store change, or a read of the store, into an operation's outcome: answered inline when
/// nothing had to reach the disk first (the completion ran at once), else when the committer calls
/// back, through a `PendingAnswer`. The committer's thread builds the answer, which then reaches the
/// event loop with the others of its sync.
final class StoreCommit: Sendable {
    private enum State {
        case waiting
        case completed(Result<Void, StoreError>)
        case pending(PendingAnswer, @Sendable () -> PendingAnswer.Outcome)
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
        return try commit.outcome { .success(answer(value)) }
    }

    /// Reads `store` with `read` and answers with `answer` of what it found, once every change the
    /// read could have seen is durable (`Store.observing`): at once, unless changes are still on
    /// their way to the disk. `answer` may refuse (a session not found): that too is an answer
    /// that rests on what was read.
    static func read<Value>(
        _ store: Store, _ read: () -> Value, answer: @escaping @Sendable (Value) -> PendingAnswer.Outcome
    ) throws(ProtocolError) -> Operation.Outcome where Value: Sendable {
        let (value, now, commit) = observe(store, read)
        switch now {
        case .success?: return try Self.outcome(of: answer(value))
        case .failure(let error)?: throw protocolError(error)
        case nil: return try commit!.outcome { answer(value) }
        }
    }

    /// For a read that writes its answer into `buffer` as it reads (`Store.writeSession`): `read` gets
    /// the buffer and the waiter to hand the store, and says whether it found anything (else it wrote
    /// nothing, and the answer is `notFound`) and whether the answer must wait for the disk. At once
    /// (the usual case): left in place, and `nil` returned. When it must wait, what was written is
    /// taken out of `buffer` (copied: the batch's storage goes on) and kept for then.
    static func readWriting(
        into buffer: inout ByteBuffer, notFound: ProtocolError,
        _ read: (inout ByteBuffer, () -> Store.Completion) -> (found: Bool, waits: Bool)
    ) throws(ProtocolError) -> Operation.Outcome? {
        let start = buffer.writerIndex
        var commit: StoreCommit?
        let (found, waits) = read(&buffer) {
            let made = StoreCommit()
            commit = made
            return { made.complete($0) }
        }
        guard waits else {
            guard found else { throw notFound }
            return nil
        }
        let answer: PendingAnswer.Outcome =
            found ? .success(.encoded(ByteBuffer(bytes: buffer.viewBytes(at: start, length: buffer.writerIndex - start)!))) : .failure(notFound)
        buffer.moveWriterIndex(to: start)
        return try commit!.outcome { answer }
    }

    /// `read`'s value and, when the changes it could have seen are durable already, that outcome;
    /// else the commit their completion will complete. The usual case, nothing on its way to the disk,
    /// allocates nothing here.
    private static func observe<Value>(
        _ store: Store, _ read: () -> Value
    ) -> (Value, Result<Void, StoreError>?, StoreCommit?) {
        var commit: StoreCommit?
        let (value, now) = store.observing(read) {
            let made = StoreCommit()
            commit = made
            return { made.complete($0) }
        }
        return (value, now, commit)
    }

    private static func outcome(of answer: PendingAnswer.Outcome) throws(ProtocolError) -> Operation.Outcome {
        switch answer {
        case .success(.object(let result)): return .done(result)
        case .success(.encoded(let result)): return .encoded(result)
        case .failure(let error): throw error
        }
    }

    /// The outcome once the completion was handed out: pending when it has not run yet.
    private func outcome(_ answer: @escaping @Sendable () -> PendingAnswer.Outcome) throws(ProtocolError) -> Operation.Outcome {
        let pending = state.withLock { state -> PendingAnswer? in
            guard case .waiting = state else { return nil }
            let pending = PendingAnswer()
            state = .pending(pending, answer)
            return pending
        }
        if let pending { return .pending(pending) }
        if case .completed(.failure(let error)) = state.withLock({ $0 }) { throw Self.protocolError(error) }
        return try Self.outcome(of: answer())
    }

    private func complete(_ result: Result<Void, StoreError>) {
        let pending = state.withLock { state -> (PendingAnswer, @Sendable () -> PendingAnswer.Outcome)? in
            if case .pending(let pending, let answer) = state { return (pending, answer) }
            state = .completed(result)
            return nil
        }
        guard let (pending, answer) = pending else { return }
        switch result {
        case .success: pending.complete(answer())
        case .failure(let error): pending.complete(.failure(Self.protocolError(error)))
        }
    }

    /// The protocol's view of a store failure: whatever the cause, the change did not happen.
    static func protocolError(_ error: StoreError) -> ProtocolError {
        .storageUnavailable(error.message)
    }
}
