import KeyholeProtocol
import NIOCore

/// Running an operation and writing its answer: as a `Response`, or in place into the batch.
extension ServedConnection {
    func respond(to request: Request, entry: ServerCore.Entry, started: NIODeadline) -> Response? {
        if limits.requestsPerSecond > 0, let refusal = rateRefusal() {
            return Response(id: request.id, outcome: .failure(refusal))
        }
        entry.counter.add()
        if !entry.requires.isEmpty, let refusal = refusal(of: request.op, requiring: entry.requires) {
            return Response(id: request.id, outcome: .failure(refusal))
        }
        let requestContext = RequestContext(logger: logger)
        switch entry.operation.body {
        case .sync(let body):
            do {
                return Response(id: request.id, outcome: .success(try body(request, requestContext)))
            } catch {
                return Response(id: request.id, outcome: .failure(error))
            }
        case .writing(let body):
            do throws(ProtocolError) {
                if !isWritable, unsentBytes > limits.maxUnsentBytes {
                    cutSlowReader()
                }
                guard !closing, machine.state != .closed else {
                    // Nobody will read it: run the operation all the same, as every other one runs, so
                    // that its metrics count what it found.
                    var result = ByteBuffer()
                    if let outcome = try body(request, requestContext, &result) {
                        return answer(request, outcome, metrics: entry.metrics, started: started)
                    }
                    return .encoded(id: request.id, result: result)
                }
                var deferred: Operation.Outcome?
                try writeInPlace(id: request.id) { buffer throws(ProtocolError) in
                    deferred = try body(request, requestContext, &buffer)
                    return deferred == nil
                }
                if let deferred {
                    return answer(request, deferred, metrics: entry.metrics, started: started)
                }
                answeredInPlace = true
                return nil
            } catch {
                return Response(id: request.id, outcome: .failure(error))
            }
        case .async(let body):
            startTask(request: request, metrics: entry.metrics, started: started) { () async throws(ProtocolError) in
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
            startTask(request: request, metrics: metrics, started: started, work)
            return nil
        case .pending(let pending):
            wait(for: pending, id: request.id, metrics: metrics, started: started)
            return nil
        }
    }

    /// Writes a success whose result `body` writes, straight into the batch (the caller has dealt with
    /// a slow reader). When `body` throws, or returns false (it wrote nothing: its answer comes
    /// otherwise), nothing of the answer stays.
    func writeInPlace(
        id: RequestID?, _ body: (inout ByteBuffer) throws(ProtocolError) -> Bool
    ) throws(ProtocolError) {
        prepareOutbound()
        let start = outbound.writerIndex
        var written = false
        do {
            try FrameEncoder.writeFrame(into: &outbound) { buffer throws(ProtocolError) in
                Response.writeSuccessHead(id: id, to: &buffer)
                let resultStart = buffer.writerIndex
                written = try body(&buffer)
                assert(!written || buffer.writerIndex > resultStart, "a writing operation said it wrote, and wrote nothing")
                buffer.writeInteger(UInt8(ascii: "}"))
            }
        } catch {
            outbound.moveWriterIndex(to: start)
            throw error
        }
        guard written else {
            outbound.moveWriterIndex(to: start)
            return
        }
        outboundWritten(outbound.writerIndex - start)
    }
}
