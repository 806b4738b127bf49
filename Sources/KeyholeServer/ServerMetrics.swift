import CoreMetrics
import KeyholeProtocol
import NIOCore
import Synchronization

/// The main socket's metrics (Sources/KeyholeMetrics/METRICS.md), recorded through swift-metrics:
/// every handle is made here, once, when the server is built, so a request only increments.
/// Without a bootstrapped metrics system the handles do nothing.
package final class ServerMetrics: Sendable {
    /// One operation's requests and their durations; error codes get their counters on first use
    /// (the closed list of codes bounds them).
    package final class Operation: Sendable {
        let op: String
        private let ok: Counter
        private let duration: Timer
        private let errors = Mutex<[ProtocolError.Code: Counter]>([:])

        package init(op: String) {
            self.op = op
            ok = Counter(label: "keyholed_requests_total", dimensions: [("op", op), ("code", "ok")])
            duration = Timer(label: "keyholed_request_duration_seconds", dimensions: [("op", op)])
        }

        /// Counts an answer (`code` nil: a result) given `started` (`ServedConnection.now` as its frame was cut).
        package func record(_ code: ProtocolError.Code?, since started: NIODeadline) {
            count(code)
            duration.recordNanoseconds(NIODeadline.now().uptimeNanoseconds &- started.uptimeNanoseconds)
        }

        /// `record(_:since:)` of an answer made in the pass that started at `started`: its duration
        /// recorded by `pass` as the pass ends (or now, without one).
        func record(_ code: ProtocolError.Code?, since started: NIODeadline, in pass: PassDurations?) {
            guard let pass else { return record(code, since: started) }
            count(code)
            pass.add(duration, since: started)
        }

        private func count(_ code: ProtocolError.Code?) {
            if let code {
                errors.withLock { errors in
                    if let counter = errors[code] { return counter }
                    let counter = Counter(label: "keyholed_requests_total", dimensions: [("op", op), ("code", code.rawValue)])
                    errors[code] = counter
                    return counter
                }.increment()
            } else {
                ok.increment()
            }
        }

        func record(_ response: Response, since started: NIODeadline) {
            if case .failure(let error) = response.outcome {
                record(error.code, since: started)
            } else {
                record(nil, since: started)
            }
        }

        /// `record(_:since:in:)` of a response.
        func record(_ response: Response, since started: NIODeadline, in pass: PassDurations?) {
            let code: ProtocolError.Code? = if case .failure(let error) = response.outcome { error.code } else { nil }
            record(code, since: started, in: pass)
        }
    }

    /// Requests naming no operation keyholed offers, or no parsable request at all.
    let unknown = Operation(op: "unknown")
    let accepted = Counter(label: "keyholed_connections_accepted_total")
    let refusedOverMax = Counter(label: "keyholed_connections_refused_total", dimensions: [("reason", "max_connections")])
    let refusedOverUIDMax = Counter(label: "keyholed_connections_refused_total", dimensions: [("reason", "max_connections_per_uid")])
    let refusedOverUIDRate = Counter(label: "keyholed_connections_refused_total", dimensions: [("reason", "connections_per_second_per_uid")])
    let frameErrors = Counter(label: "keyholed_frame_errors_total")
    let slowReaders = Counter(label: "keyholed_slow_readers_total")

    init() {
        SessionMetrics.register()
    }
}
