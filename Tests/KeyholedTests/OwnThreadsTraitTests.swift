import Dispatch
import Foundation
import KeyholeTestSupport
import Synchronization
import Testing

/// The test harness's own threads (`OwnThreadsTrait`): tests that block do it on threads of their
/// own, a bounded number at a time, never on the cooperative threads all tests share.
@Suite("own threads for blocking tests")
struct OwnThreadsTraitTests {
    @Test("a job blocked on the pool does not keep the next from running: each gets a thread")
    func blockedJobsEachGetAThread() async throws {
        let pool = GrowingThreadPool(idleTimeout: .milliseconds(200))
        let gate = DispatchSemaphore(value: 0)
        // Eight tasks block until the last one opens the gate: with fewer than nine threads this
        // never ends (the cooperative pool has two here).
        try await withTaskExecutorPreference(pool) {
            try await withThrowingTaskGroup(of: Void.self) { group in
                for _ in 0..<8 {
                    group.addTask {
                        #expect(gate.wait(timeout: .now() + 60) == .success, "the ninth job never ran")
                    }
                }
                group.addTask {
                    for _ in 0..<8 { gate.signal() }
                }
                try await group.waitForAll()
            }
        }
        #expect(pool.threadsStarted >= 9)
    }

    @Test("an idle thread takes the next job rather than a new thread starting")
    func idleThreadsAreReused() async {
        let pool = GrowingThreadPool(idleTimeout: .seconds(60))
        for round in 0..<20 {
            let value = await withTaskExecutorPreference(pool) { () async -> Int in round }
            #expect(value == round)
        }
        // Each round's one job ran and its thread went idle before the next round began; a thread
        // may still be between its job and the idle list when the next job comes, so allow a few.
        #expect(pool.threadsStarted < 20, "\(pool.threadsStarted) threads for 20 jobs one after another")
    }

    @Test("admission: width places, the next waits until one is left, then only one goes in")
    func admissionBounds() async {
        let admission = TestAdmission(width: 2)
        await admission.enter()
        await admission.enter()
        #expect(admission.free == 0)
        let (entered, entering) = AsyncStream<Int>.makeStream()
        let third = Task {
            await admission.enter()
            entering.yield(3)
        }
        let fourth = Task {
            await admission.enter()
            entering.yield(4)
        }
        // Both wait (a yield lets them get there); neither goes in until a place is left.
        while admission.waiting < 2 { await Task.yield() }
        admission.leave()
        var iterator = entered.makeAsyncIterator()
        let first = await iterator.next()
        #expect(admission.waiting == 1, "one place left let in more than one")
        #expect(admission.free == 0)
        admission.leave()
        let second = await iterator.next()
        #expect(Set([first, second]) == [3, 4])
        await third.value
        await fourth.value
        admission.leave()
        admission.leave()
        #expect(admission.free == 2)
        #expect(admission.waiting == 0)
    }

    @Test("a test with the trait runs off the cooperative threads, in a place of its own", .ownThreads)
    func traitRunsOnOwnThread() async {
        #expect(OwnThreadsTrait.admitted)
        #expect(OwnThreadsTrait.admission.free < OwnThreadsTrait.width)
        #expect(GrowingThreadPool.isCurrentThreadOwn)
        // And after a suspension too: the preference holds for the whole test.
        await Task.yield()
        #expect(GrowingThreadPool.isCurrentThreadOwn)
    }

    @Test("without the trait, a test runs on the cooperative threads (so the check above can fail)")
    func withoutTheTrait() {
        #expect(!OwnThreadsTrait.admitted)
        #expect(!GrowingThreadPool.isCurrentThreadOwn)
    }
}

/// Checks that the caller runs on the pool in a place, and adds the place to `places`; the places so
/// far.
private func noteOwnPlace(in places: borrowing Mutex<[Int]>) -> [Int] {
    #expect(GrowingThreadPool.isCurrentThreadOwn)
    let place = OwnThreadsTrait.place
    #expect(place != nil, "a test of a suite with the trait runs without a place")
    return places.withLock { places in
        places.append(place ?? 0)
        return places
    }
}

/// The places that suites with the trait take: one for a serialized suite, one per test case
/// otherwise, none for a test with a time limit (which would spend its limit queued).
@Suite("own threads: a serialized suite takes one place for all its tests", .ownThreads, .serialized)
struct SerializedOwnThreadsTests {
    private static let places = Mutex<[Int]>([])

    @Test("the first test runs in the suite's place")
    func first() { Self.check() }

    @Test("the second test runs in the same place")
    func second() { Self.check() }

    private static func check() {
        let places = noteOwnPlace(in: Self.places)
        // Pairs, as the two tests come (run again, with --repetitions, the suite takes a new place).
        if places.count.isMultiple(of: 2) {
            #expect(places[places.count - 1] == places[places.count - 2], "the tests of one serialized suite took places \(places)")
        }
    }
}

@Suite("own threads: a suite whose tests run at once takes a place for each", .ownThreads)
struct ParallelOwnThreadsTests {
    private static let places = Mutex<[Int]>([])

    @Test("one test runs in a place of its own")
    func first() { Self.check() }

    @Test("another test runs in another place")
    func second() { Self.check() }

    @Test("a test with a time limit runs on the pool without waiting for a place", .timeLimit(.minutes(1)))
    func limited() async {
        #expect(OwnThreadsTrait.place == nil)
        #expect(GrowingThreadPool.isCurrentThreadOwn)
        await Task.yield()
        #expect(GrowingThreadPool.isCurrentThreadOwn)
    }

    private static func check() {
        let places = noteOwnPlace(in: Self.places)
        #expect(Set(places).count == places.count, "two tests shared one place: \(places)")
    }
}
