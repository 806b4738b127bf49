import KeyholeProtocol
import NIOCore
import Synchronization

/// Why the server ended a connection, readable after the channel (and its handler) are gone.
final class CloseReason: Sendable {
    private let reason = Mutex<ProtocolError?>(nil)

    /// The first connection-level error response, if the server sent one.
    var value: ProtocolError? { reason.withLock { $0 } }

    func record(_ error: ProtocolError) {
        reason.withLock { if $0 == nil { $0 = error } }
    }

    /// The error for a request that could not be answered on this connection.
    var clientError: KeyholeClientError {
        value.map { KeyholeClientError.connectionClosed(because: $0) } ?? .connectionClosed
    }
}

/// Gives each outgoing request an id, and each incoming response to the caller waiting on that id.
final class ClientHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = Outbound
    typealias OutboundOut = ByteBuffer

    /// A request to send and the promise its response fulfils.
    struct Outbound: Sendable {
        var op: String
        var args: [String: JSONValue]
        var promise: EventLoopPromise<Response>
    }

    /// Responses may be up to 16 MiB whatever the server's request limit (PROTOCOL.md section 2).
    private var decoder = FrameDecoder(maxFrameBytes: FrameDecoder.limit)
    private var pending: [Int64: EventLoopPromise<Response>] = [:]
    private var nextID: Int64 = 1
    /// Set once the connection is unusable; later requests fail with it at once.
    private var failure: (any Error)?
    private let closeReason: CloseReason

    init(closeReason: CloseReason) {
        self.closeReason = closeReason
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let outbound = unwrapOutboundIn(data)
        if let failure {
            outbound.promise.fail(failure)
            promise?.fail(failure)
            return
        }
        let id = nextID
        nextID += 1
        pending[id] = outbound.promise
        var buffer = context.channel.allocator.buffer(capacity: 64)
        FrameEncoder.writeFrame(into: &buffer) {
            Request(id: .int(id), op: outbound.op, args: outbound.args).write(to: &$0)
        }
        let written = context.eventLoop.makePromise(of: Void.self)
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        written.futureResult.whenFailure { error in
            handler.value.pending.removeValue(forKey: id)?.fail(error)
        }
        written.futureResult.cascade(to: promise)
        context.write(wrapOutboundOut(buffer), promise: written)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        decoder.append(unwrapInboundIn(data))
        do {
            while let frame = try decoder.next() {
                let response: Response
                do {
                    response = try Response.parse(frame)
                } catch {
                    throw KeyholeClientError.invalidResponse(error.message)
                }
                deliver(response, context: context)
            }
        } catch {
            failAll(error as? KeyholeClientError ?? .invalidResponse("\(error)"))
            context.close(promise: nil)
        }
    }

    private func deliver(_ response: Response, context: ChannelHandlerContext) {
        if case .int(let id)? = response.id, let promise = pending.removeValue(forKey: id) {
            promise.succeed(response)
        } else if response.id == nil, case .failure(let error) = response.outcome {
            // An error without an id concerns the connection (overloaded, a framing error): it ends every request.
            closeReason.record(error)
            failAll(error)
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        failAll(KeyholeClientError.connectionClosed)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        failAll(KeyholeClientError.connectionClosed)
        context.close(promise: nil)
    }

    private func failAll(_ error: any Error) {
        if failure == nil { failure = error }
        let waiting = pending
        pending.removeAll()
        for promise in waiting.values { promise.fail(error) }
    }
}
