import CoreMetrics
import NIOCore
import Synchronization
import Testing

@testable import KeyholeServer

/// The request durations of a loop's pass, recorded together as the pass ends.
@Suite("PassDurations")
struct PassDurationsTests {
    /// A histogram that keeps what it was given.
    final class Durations: TimerHandler, Sendable {
        let values = Mutex<[Int64]>([])
        func recordNanoseconds(_ duration: Int64) { values.withLock { $0.append(duration) } }
        var recorded: [Int64] { values.withLock { $0 } }
    }

    @Test("nothing is recorded before the pass ends; then each answer once, from the pass's start to its end")
    func recordedAsThePassEnds() {
        let pass = PassDurations()
        let ping = Durations(), get = Durations()
        let started = NIODeadline.now() - .milliseconds(5)
        pass.add(Timer(label: "ping", dimensions: [], handler: ping), since: started)
        pass.add(Timer(label: "get", dimensions: [], handler: get), since: started)
        pass.add(Timer(label: "get", dimensions: [], handler: get), since: started)
        #expect(ping.recorded.isEmpty && get.recorded.isEmpty)
        let before = NIODeadline.now()
        pass.record()
        let after = NIODeadline.now()
        #expect(ping.recorded.count == 1 && get.recorded.count == 2)
        // One clock read between `before` and `after` for all of them.
        for duration in ping.recorded + get.recorded {
            #expect(duration == ping.recorded[0])
            #expect(duration >= (before - started).nanoseconds && duration <= (after - started).nanoseconds)
        }
        // Recorded once: a pass that answered nothing records nothing.
        pass.record()
        #expect(ping.recorded.count == 1 && get.recorded.count == 2)
    }

    @Test("one timer's answers in a row, and again after another's, are each recorded once")
    func runsOfOneTimer() {
        let pass = PassDurations()
        let get = Durations(), ping = Durations()
        let getTimer = Timer(label: "get", dimensions: [], handler: get), pingTimer = Timer(label: "ping", dimensions: [], handler: ping)
        let started = NIODeadline.now()
        for timer in [getTimer, getTimer, getTimer, pingTimer, getTimer, pingTimer, pingTimer] { pass.add(timer, since: started) }
        pass.record()
        #expect(get.recorded.count == 4 && ping.recorded.count == 3)
        pass.add(getTimer, since: started)
        pass.record()
        #expect(get.recorded.count == 5 && ping.recorded.count == 3)
    }

    @Test("an answer from a later pass settles what an earlier one left, from that pass's own start")
    func anotherPass() {
        let pass = PassDurations()
        let first = Durations(), second = Durations()
        let earlier = NIODeadline.now() - .seconds(2)
        pass.add(Timer(label: "first", dimensions: [], handler: first), since: earlier)
        let later = NIODeadline.now() - .milliseconds(1)
        pass.add(Timer(label: "second", dimensions: [], handler: second), since: later)
        #expect(first.recorded.count == 1 && first.recorded[0] >= TimeAmount.seconds(2).nanoseconds)
        #expect(second.recorded.isEmpty)
        pass.record()
        #expect(second.recorded.count == 1 && second.recorded[0] < TimeAmount.seconds(2).nanoseconds)
    }
}
