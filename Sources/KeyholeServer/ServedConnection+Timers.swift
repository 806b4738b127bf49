import KeyholeProtocol
import NIOCore

/// What a connection's timers do when they fire, and its asynchronous work.
extension ServedConnection {
    /// The timer `kind` fired (the loop has already forgotten it). Each kind's verdicts are the state
    /// machine's: idle and drain timers close (an idle one during shutdown drains, to say goodbye),
    /// frame and first-request timers stop reading.
    func timerFired(_ kind: ConnectionTimer) {
        let now = self.now
        let verdict: ConnectionStateMachine.TimerVerdict
        switch kind {
        case .refusalHeld:
            // Given back when the connection closes, as the answer is sent.
            if let (_, error) = access.heldRefusal { answerRefusal(error) }
            return
        case .idle: verdict = machine.idleTimerFired(now: now)
        case .frame: verdict = machine.frameTimerFired(now: now)
        case .firstRequest: verdict = machine.firstRequestTimerFired(now: now)
        case .drain: verdict = machine.drainTimerFired(now: now)
        }
        switch verdict {
        case .close:
            if kind == .drain {
                noteLimited("connection.drain_timeout", ["in_flight": "\(machine.inFlight)"])
            } else {
                logger.debug("connection.idle_timeout")
            }
            closeNow()
        case .drain:
            if kind == .frame {
                noteLimited("connection.frame_timeout", ["buffered_bytes": "\(decoder.bufferedBytes)"])
            } else if kind == .idle {
                logger.debug("connection.idle_timeout")
            } else {
                logger.debug("connection.draining")
            }
            afterStoppingReading(serve: true)
        case .rearm(let deadline):
            setTimer(kind, at: deadline)
        case .disarm:
            break
        }
    }

    /// A closure that, called from any thread, runs `body` with this connection and its argument on
    /// the connection's loop.
    func onLoop<Value: Sendable>(_ body: @escaping (Self, Value) -> Void) -> @Sendable (Value) -> Void {
        let run = confined(body)
        let execute = executor
        return { value in execute { run(value) } }
    }

    /// Runs `work` in a task that answers request `id` on the connection's loop when done.
    func startTask(
        id: RequestID?, metrics: ServerMetrics.Operation, started: NIODeadline,
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
            let response = Response(id: id, outcome: outcome)
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
