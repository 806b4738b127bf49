import KeyholeProtocol
import NIOCore

/// Sends each request with the id its call chose, and hands each answer to the call waiting on that
/// id; tells every waiting call what became of its request when the connection ends.
final class ClientHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = Outbound
    typealias OutboundOut = ByteBuffer

    /// A request to send and the promise its outcome fulfils.
    struct Outbound: Sendable {
        var id: Int64
        var op: String
        var args: [String: JSONValue]
        var promise: EventLoopPromise<SendOutcome>
    }

    /// A user outbound event: the call of this id stopped waiting (its deadline passed); its answer,
    /// if it comes, is dropped like any answer nobody waits for.
    struct Forget: Sendable {
        var id: Int64
    }

    private struct Pending {
        var promise: EventLoopPromise<SendOutcome>
        var written = false
    }

    /// Responses may be up to 16 MiB whatever the server's request limit (PROTOCOL.md section 2).
    private var decoder = FrameDecoder(maxFrameBytes: FrameDecoder.limit)
    private var pending: [Int64: Pending] = [:]
    private let status: ConnectionStatus

    init(status: ConnectionStatus) {
        self.status = status
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        let outbound = unwrapOutboundIn(data)
        if !status.isUsable {
            // Ended, or retired (shutting_down, a null-id error): it goes on a new connection, or
            // fails with the connection's error (rule 4).
            outbound.promise.succeed(status.unwrittenOutcome)
            promise?.succeed(())
            return
        }
        let id = outbound.id
        pending[id] = Pending(promise: outbound.promise)
        var buffer = context.channel.allocator.buffer(capacity: 64)
        FrameEncoder.writeFrame(into: &buffer) {
            Request(id: .int(id), op: outbound.op, args: outbound.args).write(to: &$0)
        }
        let written = promise ?? context.eventLoop.makePromise(of: Void.self)
        let handler = NIOLoopBound(self, eventLoop: context.eventLoop)
        let status = self.status
        written.futureResult.whenComplete { result in
            switch result {
            case .success:
                handler.value.pending[id]?.written = true
            case .failure:
                // Not a whole frame went out, so keyholed cannot have read it.
                handler.value.pending.removeValue(forKey: id)?.promise.succeed(status.unwrittenOutcome)
            }
        }
        context.write(wrapOutboundOut(buffer), promise: written)
    }

    func triggerUserOutboundEvent(context: ChannelHandlerContext, event: Any, promise: EventLoopPromise<Void>?) {
        if let forget = event as? Forget {
            pending.removeValue(forKey: forget.id)?.promise.succeed(.timedOut)
            promise?.succeed(())
        } else {
            context.triggerUserOutboundEvent(event, promise: promise)
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        decoder.append(unwrapInboundIn(data))
        do throws(ProtocolError) {
            while let frame = try decoder.next() {
                let response: Response
                do {
                    response = try Response.parse(frame)
                } catch {
                    throw ProtocolError.badRequest(error.message)
                }
                deliver(response, context: context)
            }
        } catch {
            // A frame length of 0 or over 16 MiB, not UTF-8 JSON, not an object, not a response.
            status.retire()
            endAll(with: .protocolViolation(error.message))
            context.close(promise: nil)
        }
    }

    private func deliver(_ response: Response, context: ChannelHandlerContext) {
        if case .int(let id)? = response.id, let waiting = pending.removeValue(forKey: id) {
            if case .failure(let error) = response.outcome, error.code == .shuttingDown {
                // keyholed is stopping: nothing more goes on this connection; it closes it once drained.
                status.retire()
            }
            waiting.promise.succeed(.answered(response))
        } else if response.id == nil, case .failure(let error) = response.outcome {
            // An error without an id concerns the connection: nothing more goes on it.
            if error.code == .shuttingDown {
                // keyholed's goodbye: it answered everything it read and closes the connection, so
                // the calls still waiting were never read, and go again on a new one (section 8, rule 3).
                status.sayGoodbye()
            } else {
                // Overloaded, a framing error: keyholed still answers the requests it had read before
                // it closes the connection; the calls still waiting then fail with this error (rule 4).
                status.refuse(error)
            }
        }
        // Anything else answers a request nobody waits for (a call that timed out): dropped.
    }

    func channelInactive(context: ChannelHandlerContext) {
        status.retire()
        endAll(with: status.endOutcome)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // ECONNRESET and the like: the connection is over; channelInactive tells the calls.
        status.retire()
        context.close(promise: nil)
    }

    /// Ends every waiting call: written requests with `outcome`, unwritten ones as never sent.
    private func endAll(with outcome: SendOutcome) {
        let waiting = pending
        pending.removeAll()
        if case .connectionRefused = outcome, !waiting.isEmpty { status.refusalTold() }
        for request in waiting.values {
            request.promise.succeed(request.written || outcome != .lost ? outcome : .notWritten)
        }
    }
}
