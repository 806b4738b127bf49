import NIOCore

/// What serves one connection of a `SocketLoop`: it is told what happened on the socket, always on the
/// loop's thread, and answers by writing into `SocketConnection.output`.
public protocol SocketConnectionDelegate: AnyObject {
    /// Bytes arrived (never empty). The buffer is the loop's: keep it (it is not reused while held),
    /// or let it go to spare the loop an allocation for its next read.
    func received(_ bytes: ByteBuffer, on connection: SocketConnection)
    /// The peer finished sending (end of file); the socket is no longer watched for input.
    func inputClosed(on connection: SocketConnection)
    /// `connection.isWritable` changed.
    func writabilityChanged(on connection: SocketConnection)
    /// `connection.deadline` has passed (it was cleared first).
    func deadlineReached(now: NIODeadline, on connection: SocketConnection)
    /// The loop is shutting down gracefully: finish what was asked and close.
    func quiesce(on connection: SocketConnection)
    /// The connection is closed, by either side or an error; the last call.
    func closed(_ connection: SocketConnection)
}
