import KeyholeProtocol
import Logging
import NIOCore

/// What an operation sees of the request besides its arguments.
///
/// Its parts sit in one shared object: every request is handed its connection's context, and a copy
/// of a `Logger` retains and releases each of its handler's references.
public struct RequestContext: Sendable {
    private final class Parts: Sendable {
        let logger: Logger
        let peerUID: UInt32?

        init(logger: Logger, peerUID: UInt32?) {
            self.logger = logger
            self.peerUID = peerUID
        }
    }

    private var parts: Parts

    /// A logger carrying the connection's metadata.
    public var logger: Logger {
        get { parts.logger }
        set { parts = Parts(logger: newValue, peerUID: parts.peerUID) }
    }

    /// The peer's uid, as the kernel gave it (`nil` when it could not be read).
    public var peerUID: UInt32? {
        get { parts.peerUID }
        set { parts = Parts(logger: parts.logger, peerUID: newValue) }
    }

    /// A context whose operations log to `logger`, for a peer of uid `peerUID`.
    public init(logger: Logger, peerUID: UInt32? = nil) {
        parts = Parts(logger: logger, peerUID: peerUID)
    }
}

/// One operation of the protocol: its code, run inline on the event loop or as a task.
public struct Operation: Sendable {
    /// The signature of an operation that answers at once.
    public typealias SyncBody = @Sendable (Request, RequestContext) throws(ProtocolError) -> [String: JSONValue]
    /// The signature of an operation that usually answers at once by writing its result (one compact
    /// JSON object) straight into the answer's bytes: no dictionary of members, no buffer of its own.
    /// It returns `nil` when it wrote its result, else its outcome as a deferrable operation's (it must
    /// then write nothing). It checks what can fail before it writes: when it throws, what it wrote is
    /// discarded.
    public typealias WritingBody = @Sendable (Request, RequestContext, inout ByteBuffer) throws(ProtocolError) -> Outcome?
    /// The signature of an operation that waits for something (disk, network, time).
    public typealias AsyncBody = @Sendable (Request, RequestContext) async throws(ProtocolError) -> [String: JSONValue]

    /// What an operation with a fast path found: the answer, or work that must wait.
    public enum Outcome: Sendable {
        /// The answer, found without waiting.
        case done([String: JSONValue])
        /// The answer, found without waiting and already encoded as one compact JSON object.
        case encoded(ByteBuffer)
        /// The answer needs waiting (a key-set fetch, say): run this as a task.
        case later(@Sendable () async throws(ProtocolError) -> [String: JSONValue])
        /// The answer comes when another thread completes it (a write made durable, say), without a
        /// task: the cheapest way to wait for another thread.
        case pending(PendingAnswer)
    }

    /// The signature of an operation that usually answers at once but sometimes has to wait.
    public typealias DeferrableBody = @Sendable (Request, RequestContext) throws(ProtocolError) -> Outcome

    enum Body: Sendable {
        case sync(SyncBody)
        case writing(WritingBody)
        case async(AsyncBody)
        case deferrable(DeferrableBody)
    }

    let body: Body

    /// An operation that answers without waiting: run on the connection's event loop, with no task or hop.
    /// It must not block.
    public static func sync(_ body: @escaping SyncBody) -> Operation { Operation(body: .sync(body)) }

    /// An operation that answers like `deferrable` but writes a result found at once in place: for the
    /// cheapest and most frequent answers (ping, session.get), where building a dictionary or a buffer
    /// of their own would cost more than the rest.
    public static func writing(_ body: @escaping WritingBody) -> Operation { Operation(body: .writing(body)) }

    /// An operation run inline on the event loop like `sync`, which may hand the rest of its work to a
    /// task (`.later`) when it has to wait: the common case pays for no task.
    public static func deferrable(_ body: @escaping DeferrableBody) -> Operation { Operation(body: .deferrable(body)) }

    /// An operation that awaits: run in its own task, so it holds back no other request.
    public static func async(_ body: @escaping AsyncBody) -> Operation { Operation(body: .async(body)) }
}
