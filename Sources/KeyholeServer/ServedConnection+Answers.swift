import KeyholeProtocol
import NIOCore

/// Running an operation and writing its answer: as a `Response`, or in place into the batch.
extension ServedConnection {
    func respond(to request: Request, entry: ServerCore.Entry, started: NIODeadline) -> Response? {
        if limits.rates.requests > 0, let refusal = rateRefusal() {
            return Response(id: request.id, outcome: .failure(refusal))
        }
        entry.counter.add()
        if !entry.requires.isEmpty, let refusal = refusal(of: request.op, requiring: entry.requires) {
            return Response(id: request.id, outcome: .failure(refusal))
        }
        let requestContext = self.requestContext ?? makeRequestContext()
        switch entry.operation.body {
        case .sync(let body):
            do {
                return Response(id: request.id, outcome: .success(try body(request, requestContext)))
            } catch {
                return Response(id: request.id, outcome: .failure(error))
            }
        case .writing:
            // Called through the entry's own copy of the closure, not one bound out of the enum here.
            return respondInPlace(to: request, entry: entry, started: started, context: requestContext)
        case .async(let body):
            // Kept for as long as the task runs: its own copy of the arguments, not the read buffer.
            let request = request.owned
            startTask(id: request.id, metrics: entry.metrics, started: started) { () async throws(ProtocolError) in
                try await body(request, requestContext)
            }
            return nil
        case .deferrable(let body):
            do throws(ProtocolError) {
                return answer(request, try body(request, requestContext), metrics: entry.metrics, started: started)
            } catch {
                return Response(id: request.id, outcome: .failure(error))
            }
        }
    }

    /// `respond(to:entry:started:)` for a `writing` operation (`entry.writing`): its result written in place.
    /// Called only where `entry.operation.body` is `.writing`, so `entry.writing` is set (`Entry.init`);
    /// it is called through `!`, not bound, since binding it would retain it again.
    private func respondInPlace(to request: Request, entry: ServerCore.Entry, started: NIODeadline, context: RequestContext) -> Response? {
        do throws(ProtocolError) {
            if !isWritable, unsentBytes > limits.maxUnsentBytes {
                cutSlowReader()
            }
            guard !closing, machine.state != .closed else {
                // Nobody will read it: run the operation all the same, as every other one runs, so
                // that its metrics count what it found.
                var result = ByteBuffer()
                if let outcome = try entry.writing!(request, context, &result) {
                    return answer(request, outcome, metrics: entry.metrics, started: started)
                }
                return .encoded(id: request.id, result: result)
            }
            // Written in place: the frame's length, the success head, the result, then the length
            // filled in; on a throw or a deferral nothing of it stays. No closure: one capturing
            // the request would copy it for every request.
            prepareOutbound()
            let start = Response.writeFramedSuccessHead(id: request.id, to: &outbound)
            let resultStart = outbound.writerIndex
            let deferred: Operation.Outcome?
            do {
                deferred = try entry.writing!(request, context, &outbound)
            } catch {
                outbound.moveWriterIndex(to: start)
                throw error
            }
            if let deferred {
                outbound.moveWriterIndex(to: start)
                return answer(request, deferred, metrics: entry.metrics, started: started)
            }
            assert(outbound.writerIndex > resultStart, "a writing operation said it wrote, and wrote nothing")
            outbound.writeInteger(UInt8(ascii: "}"))
            outbound.setInteger(UInt32(outbound.writerIndex - start - 4), at: start)
            outboundWritten(outbound.writerIndex - start)
            answeredInPlace = true
            return nil
        } catch {
            return Response(id: request.id, outcome: .failure(error))
        }
    }

    /// The response for an outcome found without waiting, or `nil` when it comes later (a task, a sync).
    private func answer(
        _ request: Request, _ outcome: Operation.Outcome, metrics: ServerMetrics.Operation, started: NIODeadline
    ) -> Response? {
        switch outcome {
        case .done(let result):
            return Response(id: request.id, outcome: .success(result))
        case .encoded(let result):
            return Response.encoded(id: request.id, result: result)
        case .later(let work):
            startTask(id: request.id, metrics: metrics, started: started, work)
            return nil
        case .pending(let pending):
            wait(for: pending, id: request.id, metrics: metrics, started: started)
            return nil
        }
    }

    /// The connection's context for requests, kept until its logger or peer changes.
    private func makeRequestContext() -> RequestContext {
        let context = RequestContext(logger: logger, peerUID: access.peer?.uid)
        requestContext = context
        return context
    }
}
