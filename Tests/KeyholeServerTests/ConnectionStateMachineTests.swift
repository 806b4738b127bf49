import NIOCore
import Testing

@testable import KeyholeServer

@Suite("ConnectionStateMachine")
struct ConnectionStateMachineTests {
    let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    func machine(maxInFlight: Int = 2) -> ConnectionStateMachine {
        ConnectionStateMachine(
            maxInFlight: maxInFlight, idleTimeout: .seconds(300), frameTimeout: .seconds(10), drainTimeout: .seconds(30),
            now: start)
    }

    @Test("requests start up to max_in_flight; then none until one finishes, and reads are held back")
    func inFlightLimit() {
        var m = machine(maxInFlight: 2)
        let initial = m.readRequested()
        #expect(initial)
        m.requestStarted()
        m.requestStarted()
        #expect(!m.mayStartRequest)
        let held = m.readRequested()
        #expect(!held)
        let first = m.requestFinished(now: start)
        #expect(first == .init(read: true))
        #expect(m.mayStartRequest)
        // The held read is released once only.
        let second = m.requestFinished(now: start)
        #expect(second == .init())
        #expect(m.inFlight == 0)
    }

    @Test("a held read stays held while complete frames wait in the decoder, and is released once they are served")
    func framesWaitBeforeReading() {
        var m = machine(maxInFlight: 1)
        m.requestStarted()
        let held = m.readRequested(framesWaiting: true)
        #expect(!held)
        // A slot frees, but frames read earlier wait: they go first (the next request takes the slot).
        let early = m.requestFinished(now: start, framesWaiting: true)
        #expect(early == .init())
        m.requestStarted()
        let writable = m.writabilityChanged(true, now: start, framesWaiting: true)
        #expect(!writable)
        // The last waiting frame's request finished: now read.
        let last = m.requestFinished(now: start, framesWaiting: false)
        #expect(last == .init(read: true))
        let free = m.readRequested(framesWaiting: true)
        #expect(!free, "with a free slot but frames waiting, they are served before more is read")
    }

    @Test("a client not reading its answers stops frames being cut and reads being issued")
    func writability() {
        var m = machine()
        let changed = m.writabilityChanged(false, now: start)
        #expect(!changed)
        #expect(!m.mayStartRequest)
        let read = m.readRequested()
        #expect(!read)
        let released = m.writabilityChanged(true, now: start)
        #expect(released)
        #expect(m.mayStartRequest)
    }

    @Test("draining serves what was read without reading more, and is done when nothing is in flight or left")
    func draining() {
        var m = machine(maxInFlight: 1)
        m.requestStarted()
        m.stopReading(now: start)
        #expect(m.state == .draining)
        #expect(m.drainDeadline == start + .seconds(30))
        let read = m.readRequested()
        #expect(!read)
        let busy = m.drainedIfIdle(framesLeft: false)
        #expect(!busy)
        _ = m.requestFinished(now: start)
        // A complete frame already read is still served first.
        let framesLeft = m.drainedIfIdle(framesLeft: true)
        #expect(!framesLeft)
        #expect(m.mayStartRequest)
        let done = m.drainedIfIdle(framesLeft: false)
        #expect(done)
        #expect(m.state == .closed)
        #expect(!m.mayStartRequest)
    }

    @Test("the drain deadline closes a connection that never finishes draining, even one already drained")
    func drainDeadline() {
        var m = machine()
        m.requestStarted()
        m.stopReading(now: start)
        let early = m.drainTimerFired(now: start + .seconds(10))
        #expect(early == .rearm(start + .seconds(30)))
        let late = m.drainTimerFired(now: start + .seconds(30))
        #expect(late == .close)
        #expect(m.state == .closed)

        var drained = machine()
        drained.stopReading(now: start)
        _ = drained.drainedIfIdle(framesLeft: false)
        // Closing waits for the last writes to flush; a client that never reads must not hold it open.
        let stuck = drained.drainTimerFired(now: start + .seconds(30))
        #expect(stuck == .close)

        var open = machine()
        let disarmed = open.drainTimerFired(now: start + .seconds(60))
        #expect(disarmed == .disarm)
    }

    @Test("a request finishing after the connection closed changes nothing")
    func finishAfterClose() {
        var m = machine()
        m.requestStarted()
        m.closed()
        let completion = m.requestFinished(now: start)
        #expect(completion == .init())
        #expect(!m.mayStartRequest)
    }

    @Test("the idle timer closes only a connection with nothing in flight and no bytes for idle_timeout")
    func idleTimeout() {
        var m = machine()
        let r1 = m.idleTimerFired(now: start + .seconds(299))
        #expect(r1 == .rearm(start + .seconds(300)))
        m.bytesReceived(framesCompleted: 1, bufferedBytes: 0, now: start + .seconds(100))
        m.requestStarted()
        let r2 = m.idleTimerFired(now: start + .seconds(500))
        #expect(r2 == .rearm(start + .seconds(800)))
        _ = m.requestFinished(now: start + .seconds(600))
        let r3 = m.idleTimerFired(now: start + .seconds(800))
        #expect(r3 == .rearm(start + .seconds(900)))
        let r4 = m.idleTimerFired(now: start + .seconds(900))
        #expect(r4 == .close)
        #expect(m.state == .closed)
    }

    @Test("a frame incomplete for frame_timeout ends reading; requests in flight are still answered")
    func slowloris() {
        var m = machine()
        m.requestStarted()
        m.bytesReceived(framesCompleted: 1, bufferedBytes: 2, now: start)
        #expect(m.frameDeadline == start + .seconds(10))
        // More bytes of the same frame do not extend its deadline.
        m.bytesReceived(framesCompleted: 0, bufferedBytes: 3, now: start + .seconds(5))
        let r1 = m.frameTimerFired(now: start + .seconds(5))
        #expect(r1 == .rearm(start + .seconds(10)))
        let r2 = m.frameTimerFired(now: start + .seconds(10))
        #expect(r2 == .drain)
        #expect(m.state == .draining)
        #expect(m.inFlight == 1)
    }

    @Test("a new frame started after a complete one gets its own deadline; no partial frame disarms")
    func frameDeadlineMoves() {
        var m = machine()
        m.bytesReceived(framesCompleted: 0, bufferedBytes: 2, now: start)
        m.bytesReceived(framesCompleted: 3, bufferedBytes: 5, now: start + .seconds(8))
        let r1 = m.frameTimerFired(now: start + .seconds(10))
        #expect(r1 == .rearm(start + .seconds(18)))
        m.bytesReceived(framesCompleted: 1, bufferedBytes: 0, now: start + .seconds(11))
        #expect(m.frameDeadline == nil)
        let r2 = m.frameTimerFired(now: start + .seconds(20))
        #expect(r2 == .disarm)
    }

    @Test("while reads are held back the delay is not the client's: no frame timeout, and a fresh clock after")
    func noFrameTimeoutUnderBackPressure() {
        var m = machine(maxInFlight: 1)
        m.requestStarted()
        m.bytesReceived(framesCompleted: 1, bufferedBytes: 2, now: start)
        let held = m.readRequested()
        #expect(!held)
        let r1 = m.frameTimerFired(now: start + .seconds(60))
        #expect(r1 == .rearm(start + .seconds(70)))
        let r2 = m.requestFinished(now: start + .seconds(61))
        #expect(r2 == .init(read: true))
        #expect(m.frameDeadline == start + .seconds(71))
    }

    @Test("shutdown: a connection with no request yet reads on for its first one, then drains; others drain at once")
    func quiesceWaitsForFirstRequest() {
        var fresh = machine()
        let verdict = fresh.quiesce(now: start, grace: .seconds(1))
        #expect(verdict == .awaitFirstRequest(start + .seconds(1)))
        #expect(fresh.state == .open)
        #expect(!fresh.firstRequestCameDuringShutdown)
        fresh.requestStarted()
        #expect(fresh.firstRequestCameDuringShutdown)
        fresh.stopReading(now: start + .milliseconds(5))
        #expect(fresh.state == .draining)
        #expect(!fresh.firstRequestCameDuringShutdown)
        #expect(fresh.drainDeadline == start + .milliseconds(5) + .seconds(30))
        // Its timer, firing late, finds nothing to do.
        let late = fresh.firstRequestTimerFired(now: start + .seconds(2))
        #expect(late == .disarm)

        var used = machine()
        used.requestStarted()
        _ = used.requestFinished(now: start)
        let drained = used.quiesce(now: start, grace: .seconds(1))
        #expect(drained == .drain)
        #expect(used.state == .draining)
        let again = used.quiesce(now: start, grace: .seconds(1))
        #expect(again == .none)
    }

    @Test("shutdown: a connection that sends nothing within the grace drains (and, idle, closes); the grace never exceeds drain_timeout")
    func quiesceGraceRunsOut() {
        var silent = machine()
        _ = silent.quiesce(now: start, grace: .seconds(1))
        let early = silent.firstRequestTimerFired(now: start + .milliseconds(400))
        #expect(early == .rearm(start + .seconds(1)))
        #expect(silent.state == .open)
        let due = silent.firstRequestTimerFired(now: start + .seconds(1))
        #expect(due == .drain)
        #expect(silent.state == .draining)
        let closes = silent.drainedIfIdle(framesLeft: false)
        #expect(closes)

        var long = machine()
        let capped = long.quiesce(now: start, grace: .seconds(600))
        #expect(capped == .awaitFirstRequest(start + .seconds(30)))
    }

    @Test("shutdown's drain ends with the goodbye; a drain that began otherwise (a frame error, the client's end of input) and a close by timer do not")
    func goodbyeOnlyAfterShutdownsDrain() {
        var used = machine()
        #expect(!used.endsWithGoodbye)
        used.requestStarted()
        _ = used.requestFinished(now: start)
        _ = used.quiesce(now: start, grace: .seconds(1))
        #expect(used.endsWithGoodbye)
        let closes = used.drainedIfIdle(framesLeft: false)
        #expect(closes)

        var fresh = machine()
        _ = fresh.quiesce(now: start, grace: .seconds(1))
        #expect(fresh.endsWithGoodbye, "also a connection shutdown waited on for its first request")

        var failed = machine()
        failed.requestStarted()
        failed.stopReading(now: start)
        let verdict = failed.quiesce(now: start, grace: .seconds(1))
        #expect(verdict == .none)
        #expect(!failed.endsWithGoodbye, "reading had stopped before shutdown: no promise about what came after")

        var idle = machine()
        let timedOut = idle.idleTimerFired(now: start + .seconds(3600))
        #expect(timedOut == .close)
        #expect(!idle.endsWithGoodbye)

        var waiting = machine()
        _ = waiting.quiesce(now: start, grace: .seconds(1))
        let idleAtShutdown = waiting.idleTimerFired(now: start + .seconds(3600))
        #expect(idleAtShutdown == .drain, "idle while shutdown waits for its first request: it drains, to say goodbye")
        #expect(waiting.state == .draining)
        #expect(waiting.endsWithGoodbye)

        var broken = machine()
        broken.requestStarted()
        _ = broken.quiesce(now: start, grace: .seconds(1))
        broken.framingFailed()
        #expect(!broken.endsWithGoodbye, "its framing error is its last frame")
    }
}
