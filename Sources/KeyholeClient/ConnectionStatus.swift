import KeyholeProtocol
import Synchronization

/// What a connection's handler tells the rest of the client, readable from any thread: whether new
/// requests may still go on it, and what a request written to it after its end comes to.
final class ConnectionStatus: Sendable {
    private struct State {
        var usable = true
        var refusal: ProtocolError?
        /// keyholed said goodbye (a null-id `shutting_down`): nothing unanswered on the connection was read.
        var saidGoodbye = false
        /// Whether a call has been told of `refusal` (it failed with it).
        var refusalTold = false
    }

    private let state = Mutex(State())

    /// False once the connection has ended, broke the protocol, was answered `shutting_down`, or got the goodbye:
    /// nothing more is sent on it (PROTOCOL.md section 8).
    var isUsable: Bool { state.withLock { $0.usable } }

    /// What a request that could not be written to this connection comes to: the null-id error that
    /// ended it (the call fails with it, rule 4), else `notWritten` (it is sent on a new connection).
    var unwrittenOutcome: SendOutcome {
        state.withLock { $0.refusal.map(SendOutcome.connectionRefused) ?? .notWritten }
    }

    /// What the calls still waiting when the connection ends come to: the null-id error keyholed
    /// sent before closing it (rule 4); `notWritten` after its goodbye, which promises that it read
    /// none of them (rule 3: each is sent on a new connection, whatever its operation); else `lost`.
    var endOutcome: SendOutcome {
        state.withLock { state in
            if let refusal = state.refusal { return .connectionRefused(refusal) }
            return state.saidGoodbye ? .notWritten : .lost
        }
    }

    /// The null-id error keyholed ended this connection with, if no call has been told of it yet;
    /// marks it told. A refusal that came while no call waited (`overloaded` on connect, read
    /// before the first request went out) goes to the next call, rather than being lost in a
    /// reconnection that keyholed would most likely refuse again.
    func takeUntoldRefusal() -> ProtocolError? {
        state.withLock { state in
            guard let refusal = state.refusal, !state.refusalTold else { return nil }
            state.refusalTold = true
            return refusal
        }
    }

    /// Calls were told of the refusal (they were waiting on the connection when it ended).
    func refusalTold() {
        state.withLock { $0.refusalTold = true }
    }

    /// Nothing more is to be sent on this connection.
    func retire() {
        state.withLock { $0.usable = false }
    }

    /// keyholed said goodbye: it is closing the connection gracefully and read nothing it has not
    /// answered (PROTOCOL.md section 5).
    func sayGoodbye() {
        state.withLock { state in
            state.usable = false
            state.saidGoodbye = true
        }
    }

    /// keyholed ended the connection with `error`, an error with a null id.
    func refuse(_ error: ProtocolError) {
        state.withLock { state in
            state.usable = false
            if state.refusal == nil { state.refusal = error }
        }
    }
}
