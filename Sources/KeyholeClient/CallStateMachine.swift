import KeyholeProtocol

/// The reconnect and re-send rules of PROTOCOL.md section 8 for one call, without I/O: the call tells
/// it what happened (and when), it answers what to do next.
///
/// - A request not yet written when its connection was found closed, or left unanswered by keyholed's
///   goodbye (which says it was never read), is sent on a new connection, whatever its operation.
/// - A request written and left unanswered when the connection ended, or answered `shutting_down`, is
///   sent again once on a new connection if its operation is safe to repeat (`KeyholeOperations`);
///   otherwise the call fails with `connection_lost` (or gets the `shutting_down` answer).
/// - Any other error with a null id ends the connection: the call gets that error, and is not sent again.
/// - `overloaded` with `retry_after_ms` reaches the caller, unless the caller asked to wait it out and
///   the wait ends before the deadline.
/// - Failed connection attempts are retried after a wait doubling from 10 ms to at most 500 ms, until
///   the deadline; then the call is `unavailable`.
struct CallStateMachine {
    /// The knobs of the rules.
    struct Configuration: Sendable {
        /// Wait `retry_after_ms` and send again after `overloaded`, within the deadline.
        var waitOutOverloaded = false
        /// The first wait after a failed connection attempt.
        var firstBackoff: Duration = .milliseconds(10)
        /// The longest wait between connection attempts.
        var maximumBackoff: Duration = .milliseconds(500)
    }

    /// What the call does next.
    enum Action: Equatable {
        /// Get a connection (the open one, or a new one) and report `connected` or `connectFailed`.
        case connect
        /// Send the request with a fresh id on the connection got, and report its `SendOutcome`.
        case send
        /// Sleep until then, and report `waited`.
        case wait(until: ContinuousClock.Instant)
        /// The call is over: keyholed's answer, or the client's error.
        case finish(Result<Response, KeyholeClientError>)
    }

    private let configuration: Configuration
    private let safeToRepeat: Bool
    private let deadline: ContinuousClock.Instant?
    /// Failed connection attempts in a row (and requests found unwritten), for the backoff.
    private var failures = 0
    /// The last reason a connection attempt failed, for `unavailable`'s message.
    private var lastFailure: String?
    /// Whether the one re-send of a written request has been used.
    private var resent = false
    /// Whether a request of this call was written (so it may have taken effect): such a call never
    /// ends `unavailable`, which says it was never sent.
    private var written = false

    /// A call of `op` that must end by `deadline` (`nil`: no deadline).
    init(op: String, deadline: ContinuousClock.Instant?, configuration: Configuration = .init()) {
        self.configuration = configuration
        self.safeToRepeat = KeyholeOperations.isSafeToRepeat(op)
        self.deadline = deadline
    }

    /// The first action: get a connection.
    mutating func start() -> Action {
        .connect
    }

    /// A connection is ready at `now`.
    mutating func connected(now: ContinuousClock.Instant) -> Action {
        if passed(now) { return finish(.failure(.timeout)) }
        return .send
    }

    /// A connection attempt failed at `now`, for `reason` (`cannot connect to PATH: ...`).
    mutating func connectFailed(_ reason: String, now: ContinuousClock.Instant) -> Action {
        lastFailure = reason
        return backOff(now: now)
    }

    /// A wait asked for by `.wait` ended at `now`.
    mutating func waited(now: ContinuousClock.Instant) -> Action {
        if passed(now) { return finish(.failure(unavailable)) }
        return .connect
    }

    /// The request sent after `.send` came to `outcome` at `now`.
    mutating func sent(_ outcome: SendOutcome, now: ContinuousClock.Instant) -> Action {
        switch outcome {
        case .answered(let response):
            failures = 0
            guard case .failure(let error) = response.outcome else { return finish(.success(response)) }
            if error.code == .shuttingDown, safeToRepeat, !resent {
                // keyholed said it did not complete it: if the re-send finds no connection, the
                // call is unavailable (no effect), not connection_lost.
                resent = true
                return .connect
            }
            if error.code == .overloaded, let wait = overloadWait(error, now: now) { return .wait(until: wait) }
            return finish(.success(response))
        case .notWritten:
            // It never reached keyholed, or keyholed said goodbye without reading it: send it on a new
            // connection, as often as the deadline allows.
            return backOff(now: now)
        case .lost:
            failures = 0
            written = true
            guard safeToRepeat, !resent else { return finish(.failure(.connectionLost)) }
            resent = true
            return passed(now) ? finish(.failure(.timeout)) : .connect
        case .connectionRefused(let error):
            if error.code == .overloaded, let wait = overloadWait(error, now: now) { return .wait(until: wait) }
            return finish(.success(Response(id: nil, outcome: .failure(error))))
        case .protocolViolation(let reason):
            return finish(.failure(.protocolError(reason)))
        case .timedOut:
            return finish(.failure(.timeout))
        }
    }

    /// The task making the call was cancelled while it waited to connect again: the call ends, as
    /// `unavailable` if nothing of it was written, else `connection_lost`.
    mutating func cancelled() -> Action {
        finish(.failure(written ? .connectionLost : .unavailable("the call was cancelled before its request was sent")))
    }

    /// The wait before the next connection attempt, doubling from `firstBackoff` to `maximumBackoff`.
    static func backoff(afterFailures failures: Int, configuration: Configuration) -> Duration {
        var wait = configuration.firstBackoff
        for _ in 1..<max(1, failures) where wait < configuration.maximumBackoff { wait *= 2 }
        return min(wait, configuration.maximumBackoff)
    }

    private mutating func backOff(now: ContinuousClock.Instant) -> Action {
        failures += 1
        if passed(now) { return finish(.failure(unavailable)) }
        var until = now + Self.backoff(afterFailures: failures, configuration: configuration)
        if let deadline, until > deadline { until = deadline }
        return .wait(until: until)
    }

    /// When to send again after `overloaded`: only if the caller asked for it, keyholed said how long,
    /// and that ends before the deadline.
    private func overloadWait(_ error: ProtocolError, now: ContinuousClock.Instant) -> ContinuousClock.Instant? {
        guard configuration.waitOutOverloaded, let retryAfterMs = error.retryAfterMs, retryAfterMs >= 0 else { return nil }
        let until = now + .milliseconds(retryAfterMs)
        if let deadline, until >= deadline { return nil }
        return until
    }

    /// What a call that found no connection before its deadline ends with: `unavailable` (never
    /// sent), or `connection_lost` when a request of it was written before (a re-send that could not go out).
    private var unavailable: KeyholeClientError {
        if written { return .connectionLost }
        return .unavailable((lastFailure ?? "keyholed could not be reached") + "; no connection before the deadline")
    }

    private func passed(_ now: ContinuousClock.Instant) -> Bool {
        deadline.map { now >= $0 } ?? false
    }

    private func finish(_ result: Result<Response, KeyholeClientError>) -> Action {
        .finish(result)
    }
}
