import KeyholeProtocol
import NIOCore
import Synchronization

/// An answer that another thread completes (a change the store's committer made durable), delivered
/// on the connection's event loop.
///
/// Cheaper than a future for the one thing it does: no promise or callback list, and the answers one
/// sync completes reach each event loop in a single hop (see `AnswerDelivery`).
public final class PendingAnswer: Sendable {
    /// A result object, or one already encoded as compact JSON.
    public enum Answer: Sendable {
        /// A result object.
        case object([String: JSONValue])
        /// A result already encoded as one compact JSON object.
        case encoded(ByteBuffer)
    }

    /// What the request gets.
    public typealias Outcome = Result<Answer, ProtocolError>
    typealias Receiver = @Sendable (Outcome) -> Void

    private enum State {
        case waiting
        case completed(Outcome)
        case awaited(AnswerDelivery, Receiver)
        case delivered
    }

    private let state = Mutex(State.waiting)
    /// Room for an encoded answer (`complete(encoding:)`), allocated by the thread that made this;
    /// dropped by the delivery on that thread when the answer did not use it (not found, failed).
    private let room: Mutex<ByteBuffer?>
    private let reserved: Bool

    /// A pending answer, to be completed once with `complete`.
    public init() {
        room = Mutex(nil)
        reserved = false
    }

    /// A pending answer whose encoded result will be written into `capacity` bytes allocated now,
    /// on this thread (`complete(encoding:)`). For an answer that another thread writes and this
    /// one sends and frees: memory allocated on one thread and freed on another costs both the
    /// allocator's lock (glibc's arenas), and on a cache miss that was two fifths of keyholed's waits.
    public init(reserving capacity: Int) {
        room = Mutex(ByteBufferAllocator().buffer(capacity: capacity))
        reserved = true
    }

    /// Whether the room reserved is still here: for the tests.
    var holdsRoom: Bool { room.withLock { $0 != nil } }

    /// Frees the room if the answer did not take it: on the delivering loop, which allocated it.
    func dropRoom() {
        guard reserved else { return }
        _ = room.withLock { $0.take() }
    }

    /// Completes the answer with a result `write` encodes (compact JSON, one object), into the room
    /// reserved at init when there is any; from any thread, as `complete`.
    public func complete(encoding write: (inout ByteBuffer) -> Void) {
        var buffer = room.withLock { $0.take() } ?? ByteBuffer()
        write(&buffer)
        complete(.success(.encoded(buffer)))
    }

    /// Completes the answer, from any thread; later completions are ignored.
    public func complete(_ outcome: Outcome) {
        let receiver = state.withLock { state -> (AnswerDelivery, Receiver)? in
            switch state {
            case .waiting:
                state = .completed(outcome)
                return nil
            case .awaited(let delivery, let receiver):
                state = .delivered
                return (delivery, receiver)
            case .completed, .delivered:
                return nil
            }
        }
        if let (delivery, receiver) = receiver { delivery.deliver(outcome, to: receiver, from: self) }
    }

    /// Has `receiver` called on `delivery`'s event loop with the outcome: later, even when it is
    /// complete already, so that the caller is never re-entered.
    func whenComplete(on delivery: AnswerDelivery, _ receiver: @escaping Receiver) {
        let completed = state.withLock { state -> Outcome? in
            switch state {
            case .waiting:
                state = .awaited(delivery, receiver)
                return nil
            case .completed(let outcome):
                state = .delivered
                return outcome
            case .awaited, .delivered:
                preconditionFailure("a pending answer is awaited once")
            }
        }
        if let completed { delivery.deliver(completed, to: receiver, from: self) }
    }
}
