import KeyholeProtocol
import Synchronization

/// What a connection's handler tells the rest of the client, readable from any thread: whether new
/// requests may still go on it, and what a request written to it after its end comes to.
final class ConnectionStatus: Sendable {
    private struct State {
        var usable = true
        var refusal: ProtocolError?
    }

    private let state = Mutex(State())

    /// False once the connection has ended, broke the protocol, or was answered `shutting_down`:
    /// nothing more is sent on it (PROTOCOL.md section 8).
    var isUsable: Bool { state.withLock { $0.usable } }

    /// What a request that could not be written to this connection comes to: the null-id error that
    /// ended it (the call fails with it, rule 4), else `notWritten` (it is sent on a new connection).
    var unwrittenOutcome: SendOutcome {
        state.withLock { $0.refusal.map(SendOutcome.connectionRefused) ?? .notWritten }
    }

    /// Nothing more is to be sent on this connection.
    func retire() {
        state.withLock { $0.usable = false }
    }

    /// keyholed ended the connection with `error`, an error with a null id.
    func refuse(_ error: ProtocolError) {
        state.withLock { state in
            state.usable = false
            if state.refusal == nil { state.refusal = error }
        }
    }
}
