import KeyholeProtocol
import Logging
import NIOCore

/// What an operation sees of the request besides its arguments.
public struct RequestContext: Sendable {
    /// A logger carrying the connection's metadata.
    public var logger: Logger
    /// The event loop of the connection, for operations that schedule work.
    public var eventLoop: any EventLoop
}

/// One operation of the protocol: its code, run inline on the event loop or as a task.
public struct Operation: Sendable {
    /// The signature of an operation that answers at once.
    public typealias SyncBody = @Sendable (Request, RequestContext) throws(ProtocolError) -> [String: JSONValue]
    /// The signature of an operation that waits for something (disk, network, time).
    public typealias AsyncBody = @Sendable (Request, RequestContext) async throws(ProtocolError) -> [String: JSONValue]

    enum Body: Sendable {
        case sync(SyncBody)
        case async(AsyncBody)
    }

    let body: Body

    /// An operation that answers without waiting: run on the connection's event loop, with no task or hop.
    /// It must not block.
    public static func sync(_ body: @escaping SyncBody) -> Operation { Operation(body: .sync(body)) }

    /// An operation that awaits: run in its own task, so it holds back no other request.
    public static func async(_ body: @escaping AsyncBody) -> Operation { Operation(body: .async(body)) }
}
