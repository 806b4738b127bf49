import KeyholeProtocol
import NIOCore

/// What a connection's timers do when they fire, and its asynchronous work.
extension ServedConnection {
    /// The timer `kind` fired (the loop has already forgotten it).
    func timerFired(_ kind: ConnectionTimer) {
        let now = NIODeadline.now()
        switch kind {
        case .idle:
            switch machine.idleTimerFired(now: now) {
            case .close:
                logger.debug("connection.idle_timeout")
                closeNow()
            case .rearm(let deadline): setTimer(.idle, at: deadline)
            case .drain, .disarm: break
            }
        case .frame:
            switch machine.frameTimerFired(now: now) {
            case .drain:
                noteLimited("connection.frame_timeout", ["buffered_bytes": "\(decoder.bufferedBytes)"])
                afterStoppingReading(serve: true)
            case .rearm(let deadline): setTimer(.frame, at: deadline)
            case .close, .disarm: break
            }
        case .firstRequest:
            switch machine.firstRequestTimerFired(now: now) {
            case .drain:
                logger.debug("connection.draining")
                afterStoppingReading(serve: true)
            case .rearm(let deadline): setTimer(.firstRequest, at: deadline)
            case .close, .disarm: break
            }
        case .drain:
            switch machine.drainTimerFired(now: now) {
            case .close:
                noteLimited("connection.drain_timeout", ["in_flight": "\(machine.inFlight)"])
                closeNow()
            case .rearm(let deadline): setTimer(.drain, at: deadline)
            case .drain, .disarm: break
            }
        }
    }

    /// Runs `work` in a task that answers `request` on the connection's loop when done.
    func startTask(
        request: Request, metrics: ServerMetrics.Operation, started: NIODeadline,
        _ work: @escaping @Sendable () async throws(ProtocolError) -> [String: JSONValue]
    ) {
        let taskID = tasks.nextID()
        let deliver = onLoop { (connection, response: Response) in
            connection.tasks.remove(taskID)
            connection.finishPending(response)
        }
        tasks.add(taskID, Task {
            let outcome: Result<[String: JSONValue], ProtocolError>
            do throws(ProtocolError) {
                outcome = .success(try await work())
            } catch {
                outcome = .failure(error)
            }
            let response = Response(id: request.id, outcome: outcome)
            metrics.record(response, since: started)
            deliver(response)
        })
    }

    /// Answers request `id` when `pending` completes, on this connection's loop.
    func wait(for pending: PendingAnswer, id: RequestID?, metrics: ServerMetrics.Operation, started: NIODeadline) {
        // The delivery runs the receiver on this connection's loop already: no second hop.
        let answered = confined { (connection, response: Response) in connection.finishPending(response) }
        pending.whenComplete(on: delivery) { outcome in
            let response: Response
            switch outcome {
            case .success(.object(let result)): response = Response(id: id, outcome: .success(result))
            case .success(.encoded(let result)): response = .encoded(id: id, result: result)
            case .failure(let error): response = Response(id: id, outcome: .failure(error))
            }
            metrics.record(response, since: started)
            answered(response)
        }
    }
}
