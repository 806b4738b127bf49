import KeyholeProtocol
@testable import KeyholePostgres
import Synchronization
import Testing

/// Every database call bounded, whatever the call does (POSTGRES.md, "PostgreSQL unreachable").
/// The hour-long timers below would hold a test for an hour if a change made it wait for them: the
/// suite's time limit fails it in minutes instead.
@Suite("deadline", .timeLimit(.minutes(10)))
struct DeadlineTests {
    @Test("a call that never ends, and ignores its cancellation, is unavailable at its bound; the caller is not held")
    func stuck() async throws {
        let started = ContinuousClock.now
        let error = await #expect(throws: PostgresStoreError.self) {
            _ = try await Deadline.run(within: .milliseconds(200), doing: "a stuck call") { () async throws -> Int in
                // Deaf to cancellation, as a call waiting on a frozen server's socket can be.
                await withCheckedContinuation { (_: CheckedContinuation<Void, Never>) in }
                return 0
            }
        }
        #expect(error?.isUnavailable == true && error?.message.contains("a stuck call") == true)
        // A hang would never return. The bound is loose: the whole test process shares two cores,
        // and a task may wait long to be run at all.
        #expect(ContinuousClock.now - started < .seconds(600))
    }

    @Test("a call that ends first gives its value or its error; the timer is not waited for")
    func first() async throws {
        let started = ContinuousClock.now
        // An hour's timer, and a bound of ten minutes: what is checked is that the call's outcome
        // does not wait for the timer, however slowly a loaded machine runs the test's tasks.
        #expect(try await Deadline.run(within: .seconds(3600), doing: "x") { 7 } == 7)
        let error = await #expect(throws: PostgresStoreError.self) {
            _ = try await Deadline.run(within: .seconds(3600), doing: "failing") { () async throws -> Int in throw PostgresStoreError.corrupt("bad row") }
        }
        #expect(error?.isCorrupt == true)
        #expect(ContinuousClock.now - started < .seconds(600), "the hour's timer was waited for")
    }

    @Test("the caller's cancellation ends the wait")
    func cancelled() async throws {
        let task = Task {
            try await Deadline.run(within: .seconds(3600), doing: "cancelled") { () async throws -> Int in
                try await Task.sleep(for: .seconds(3600))
                return 1
            }
        }
        task.cancel()
        let started = ContinuousClock.now
        await #expect(throws: PostgresStoreError.self) { _ = try await task.value }
        #expect(ContinuousClock.now - started < .seconds(600))
    }

    @Test("the wheel fires what is due, not what was cancelled, and forgets both")
    func wheel() async throws {
        let wheel = DeadlineWheel(tick: .milliseconds(5))
        let fired = Mutex<[Int]>([])
        let done = FirstOutcome<Void>()
        _ = wheel.add(deadline: .now + .milliseconds(30)) {
            fired.withLock { $0.append(1) }
            done.finish(())
        }
        let cancelled = wheel.add(deadline: .now + .milliseconds(10)) { fired.withLock { $0.append(2) } }
        wheel.cancel(cancelled)
        await done.wait()
        #expect(fired.withLock { $0 } == [1])
        #expect(wheel.count == 0)
        // Started again after it went idle.
        let again = FirstOutcome<Void>()
        _ = wheel.add(deadline: .now) { again.finish(()) }
        await again.wait()
        #expect(wheel.count == 0)
    }

    @Test("start: the outcome is handed over once, the call's or the bound's, whichever comes first")
    func started() async throws {
        let stuck = FirstOutcome<Result<Int, PostgresStoreError>>()
        let calls = Atomic(0)
        Deadline.start(within: .milliseconds(100), doing: "a stuck call", { () async throws -> Int in
            await withCheckedContinuation { (_: CheckedContinuation<Void, Never>) in }
            return 0
        }) { outcome in
            calls.add(1, ordering: .relaxed)
            stuck.finish(outcome)
        }
        guard case .failure(let failure) = await stuck.wait() else {
            Issue.record("not bounded")
            return
        }
        #expect(failure.isUnavailable && failure.message.contains("a stuck call"))

        // A bound no loaded machine reaches: the call's own value is what comes back.
        let quick = FirstOutcome<Result<Int, PostgresStoreError>>()
        Deadline.start(within: .seconds(300), doing: "x", { 7 }) { quick.finish($0) }
        #expect(try await quick.wait().get() == 7)
        #expect(calls.load(ordering: .relaxed) == 1)

        // Answered before its bound (answered here, not by a task, so no scheduling delay can let
        // the bound win): when the bound passes, nothing more is handed over and nothing expires.
        let answers = Atomic(0)
        let expiries = Atomic(0)
        let call = PendingCall<Void, Int>(
            (), within: .milliseconds(50), doing: "y",
            completion: { _ in answers.add(1, ordering: .relaxed) }, expired: { expiries.add(1, ordering: .relaxed) })
        call.answer(.success(7))
        let later = FirstOutcome<Void>()
        _ = DeadlineWheel.shared.add(deadline: .now + .milliseconds(200)) { later.finish(()) }
        await later.wait()
        #expect(answers.load(ordering: .relaxed) == 1 && expiries.load(ordering: .relaxed) == 0)
    }
}
