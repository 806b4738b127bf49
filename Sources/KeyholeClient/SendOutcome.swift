import KeyholeProtocol

/// What became of one request sent on one connection: what the connection's handler reports to the
/// call, and what `CallStateMachine` decides on.
enum SendOutcome: Sendable, Equatable {
    /// keyholed answered it (a result or one of its errors).
    case answered(Response)
    /// keyholed never read it: the connection was found closed before a byte of it was written, or
    /// keyholed said goodbye on it without answering it (PROTOCOL.md section 8, rules 1 and 3).
    case notWritten
    /// It was written, and the connection ended before its answer.
    case lost
    /// An error with a null id ended the connection (`overloaded` on connect, `bad_frame`,
    /// `frame_too_large`): the calls waiting on it fail with that error (PROTOCOL.md section 8, rule 4).
    case connectionRefused(ProtocolError)
    /// keyholed's answer broke the protocol; the client closed the connection.
    case protocolViolation(String)
    /// The call's deadline passed before the answer; a late answer is dropped.
    case timedOut
}
