@testable import KeyholeClient
import KeyholeProtocol
import Testing

/// PROTOCOL.md section 8's reconnect and re-send rules, decided without I/O: each test feeds the
/// machine what happened and when, and checks what it says to do.
@Suite("CallStateMachine")
struct CallStateMachineTests {
    let start = ContinuousClock.now
    func at(_ ms: Int) -> ContinuousClock.Instant { start + .milliseconds(ms) }
    func machine(_ op: String, deadlineMs: Int = 5000, waitOutOverloaded: Bool = false) -> CallStateMachine {
        CallStateMachine(op: op, deadline: at(deadlineMs), configuration: .init(waitOutOverloaded: waitOutOverloaded))
    }
    static let result = Response(id: .int(1), outcome: .success(["ok": true]))
    static func answer(_ error: ProtocolError, id: Int64? = 1) -> Response {
        Response(id: id.map(RequestID.int), outcome: .failure(error))
    }

    @Test("connect, send, answer: the answer is the call's result")
    func plain() {
        var call = machine("session.create")
        #expect(call.start() == .connect)
        #expect(call.connected(now: at(0)) == .send)
        #expect(call.sent(.answered(Self.result), now: at(1)) == .finish(.success(Self.result)))
    }

    @Test("failed connection attempts wait 10, 20, 40 ... ms, at most 500 ms, and end unavailable at the deadline")
    func backoff() {
        var call = machine("ping", deadlineMs: 2000)
        _ = call.start()
        var now = 0
        var waits: [Int] = []
        while true {
            let action = call.connectFailed("cannot connect to /x: No such file or directory", now: at(now))
            guard case .wait(let until) = action else {
                #expect(action == .finish(.failure(.unavailable(""))))
                if case .finish(.failure(let error)) = action { #expect(error.message.contains("cannot connect to /x")) }
                break
            }
            let waited = Int((until - at(now)) / .milliseconds(1))
            waits.append(waited)
            now += waited
            let next = call.waited(now: at(now))
            if next != .connect {
                #expect(next == .finish(.failure(.unavailable(""))))
                break
            }
        }
        #expect(Array(waits.prefix(7)) == [10, 20, 40, 80, 160, 320, 500])
        #expect(waits.dropFirst(6).dropLast().allSatisfy { $0 == 500 })
        #expect(now == 2000, "the last wait ends at the deadline")
    }

    @Test("a safe request lost, whose re-send finds no connection before the deadline, is connection_lost, never unavailable")
    func resendWithoutConnection() {
        var call = machine("session.revoke", deadlineMs: 100)
        _ = call.start()
        #expect(call.connected(now: at(0)) == .send)
        #expect(call.sent(.lost, now: at(1)) == .connect)
        var action = call.connectFailed("cannot connect to /x: No such file or directory", now: at(2))
        while case .wait(let until) = action {
            let next = call.waited(now: until)
            action = next == .connect ? call.connectFailed("cannot connect to /x", now: until) : next
        }
        #expect(action == .finish(.failure(.connectionLost)))
    }

    @Test("a call cancelled while waiting to reconnect ends: unavailable if never written, else connection_lost")
    func cancelled() {
        var never = machine("session.create")
        _ = never.start()
        #expect(never.connectFailed("cannot connect to /x", now: at(0)) == .wait(until: at(10)))
        #expect(never.cancelled() == .finish(.failure(.unavailable(""))))
        var lost = machine("session.get")
        _ = lost.start()
        _ = lost.connected(now: at(0))
        #expect(lost.sent(.lost, now: at(1)) == .connect)
        #expect(lost.cancelled() == .finish(.failure(.connectionLost)))
    }

    @Test("the backoff is capped and never zero", arguments: [1, 2, 6, 7, 8, 100, 10_000])
    func backoffCap(failures: Int) {
        let wait = CallStateMachine.backoff(afterFailures: failures, configuration: .init())
        #expect(wait >= .milliseconds(10) && wait <= .milliseconds(500))
    }

    @Test("a request not written is sent on a new connection, even a change, as often as the deadline allows")
    func notWritten() {
        var call = machine("session.create")
        _ = call.start()
        for round in 0..<5 {
            #expect(call.connected(now: at(round * 100)) == .send)
            guard case .wait = call.sent(.notWritten, now: at(round * 100)) else {
                Issue.record("not written should wait and connect again")
                return
            }
            #expect(call.waited(now: at(round * 100 + 50)) == .connect)
        }
    }

    @Test("a safe operation written and lost is sent again once; a second loss is connection_lost")
    func safeResendOnce() {
        var call = machine("session.get")
        _ = call.start()
        _ = call.connected(now: at(0))
        #expect(call.sent(.lost, now: at(1)) == .connect)
        #expect(call.connected(now: at(2)) == .send)
        #expect(call.sent(.lost, now: at(3)) == .finish(.failure(.connectionLost)))
    }

    @Test("a change written and lost is never sent again: connection_lost", arguments: ["session.create", "apple.sign_in", "session.revoke_all", "no.such.op"])
    func unsafeNotResent(op: String) {
        var call = machine(op)
        _ = call.start()
        _ = call.connected(now: at(0))
        #expect(call.sent(.lost, now: at(1)) == .finish(.failure(.connectionLost)))
    }

    @Test("shutting_down: a safe operation is sent again once on a new connection; a change gets the answer")
    func shuttingDown() {
        let answer = Self.answer(.shuttingDown())
        var read = machine("session.revoke")
        _ = read.start()
        _ = read.connected(now: at(0))
        #expect(read.sent(.answered(answer), now: at(1)) == .connect)
        _ = read.connected(now: at(2))
        #expect(read.sent(.answered(answer), now: at(3)) == .finish(.success(answer)))

        var change = machine("session.create")
        _ = change.start()
        _ = change.connected(now: at(0))
        #expect(change.sent(.answered(answer), now: at(1)) == .finish(.success(answer)))
    }

    @Test("the one re-send is shared: lost, then shutting_down, reaches the caller")
    func oneResendInAll() {
        let answer = Self.answer(.shuttingDown())
        var call = machine("session.get")
        _ = call.start()
        _ = call.connected(now: at(0))
        #expect(call.sent(.lost, now: at(1)) == .connect)
        _ = call.connected(now: at(2))
        #expect(call.sent(.answered(answer), now: at(3)) == .finish(.success(answer)))
    }

    @Test("an error with a null id ends the call with that error, safe or not; it is not sent again")
    func connectionRefused() {
        let overloaded = ProtocolError.overloaded("too many connections", retryAfterMs: 1000)
        for op in ["ping", "session.create"] {
            var call = machine(op)
            _ = call.start()
            _ = call.connected(now: at(0))
            #expect(call.sent(.connectionRefused(overloaded), now: at(1)) == .finish(.success(Self.answer(overloaded, id: nil))))
        }
    }

    @Test("overloaded reaches the caller unless asked to wait it out, and then only within the deadline")
    func overloaded() {
        let answer = Self.answer(.overloaded("rate", retryAfterMs: 200))
        var plain = machine("session.create")
        _ = plain.start()
        _ = plain.connected(now: at(0))
        #expect(plain.sent(.answered(answer), now: at(1)) == .finish(.success(answer)))

        var patient = machine("session.create", deadlineMs: 1000, waitOutOverloaded: true)
        _ = patient.start()
        _ = patient.connected(now: at(0))
        #expect(patient.sent(.answered(answer), now: at(100)) == .wait(until: at(300)))
        #expect(patient.waited(now: at(300)) == .connect)
        _ = patient.connected(now: at(301))
        #expect(patient.sent(.answered(answer), now: at(900)) == .finish(.success(answer)), "1100 ms is past the deadline")

        var refused = machine("ping", waitOutOverloaded: true)
        _ = refused.start()
        _ = refused.connected(now: at(0))
        let onConnect = ProtocolError.overloaded("too many connections", retryAfterMs: 1000)
        #expect(refused.sent(.connectionRefused(onConnect), now: at(0)) == .wait(until: at(1000)))
    }

    @Test("timeout, protocol_error: the call ends with them")
    func clientCodes() {
        var slow = machine("session.get")
        _ = slow.start()
        _ = slow.connected(now: at(0))
        #expect(slow.sent(.timedOut, now: at(5000)) == .finish(.failure(.timeout)))

        var broken = machine("session.get")
        _ = broken.start()
        _ = broken.connected(now: at(0))
        #expect(broken.sent(.protocolViolation("frame length 0"), now: at(1)) == .finish(.failure(.protocolError(""))))
    }

    @Test("a connection got after the deadline sends nothing: timeout")
    func connectedLate() {
        var call = machine("ping", deadlineMs: 100)
        _ = call.start()
        #expect(call.connected(now: at(100)) == .finish(.failure(.timeout)))
    }

    @Test("without a deadline a call keeps trying")
    func noDeadline() {
        var call = CallStateMachine(op: "ping", deadline: nil)
        _ = call.start()
        for attempt in 0..<50 {
            guard case .wait = call.connectFailed("refused", now: at(attempt * 1_000_000)) else {
                Issue.record("gave up without a deadline")
                return
            }
            #expect(call.waited(now: at(attempt * 1_000_000 + 500)) == .connect)
        }
    }
}
