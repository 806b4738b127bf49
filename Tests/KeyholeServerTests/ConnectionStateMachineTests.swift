import NIOCore
import Testing

@testable import KeyholeServer

@Suite("ConnectionStateMachine")
struct ConnectionStateMachineTests {
    let start = NIODeadline.uptimeNanoseconds(1_000_000_000)

    func machine(maxInFlight: Int = 2) -> ConnectionStateMachine {
        ConnectionStateMachine(maxInFlight: maxInFlight, idleTimeout: .seconds(300), frameTimeout: .seconds(10), now: start)
    }

    func frame(_ text: String) -> ByteBuffer { ByteBuffer(string: text) }

    @Test("frames are served up to max_in_flight, then queued, then served in order as slots free")
    func inFlightLimit() {
        var m = machine(maxInFlight: 2)
        let r1 = m.frameReceived(frame("a"))
        #expect(r1 == frame("a"))
        let r2 = m.frameReceived(frame("b"))
        #expect(r2 == frame("b"))
        let r3 = m.frameReceived(frame("c"))
        #expect(r3 == nil)
        let r4 = m.frameReceived(frame("d"))
        #expect(r4 == nil)
        #expect(m.queuedCount == 2)
        let r5 = m.requestFinished(now: start)
        #expect(r5.next == frame("c"))
        let r6 = m.requestFinished(now: start)
        #expect(r6.next == frame("d"))
        #expect(m.inFlight == 2)
        let r7 = m.requestFinished(now: start)
        #expect(r7 == .init())
        let r8 = m.requestFinished(now: start)
        #expect(r8 == .init())
        #expect(m.inFlight == 0)
    }

    @Test("reads are held back while at the limit and released when a slot frees")
    func backPressure() {
        var m = machine(maxInFlight: 1)
        let r9 = m.readRequested()
        #expect(r9)
        _ = m.frameReceived(frame("a"))
        let r10 = m.readRequested()
        #expect(!r10)
        let r11 = m.requestFinished(now: start)
        #expect(r11 == .init(read: true))
        // Released once only.
        _ = m.frameReceived(frame("b"))
        let r12 = m.requestFinished(now: start)
        #expect(r12 == .init())
    }

    @Test("reads are held back while the client does not read responses")
    func writability() {
        var m = machine()
        let r13 = m.writabilityChanged(false, now: start)
        #expect(!r13)
        let r14 = m.readRequested()
        #expect(!r14)
        let r15 = m.writabilityChanged(true, now: start)
        #expect(r15)
        let r16 = m.readRequested()
        #expect(r16)
    }

    @Test("stopping closes at once when idle, else after the last answer; no reading meanwhile")
    func draining() {
        var idle = machine()
        let r17 = idle.stopReading()
        #expect(r17)
        #expect(idle.state == .closed)

        var busy = machine(maxInFlight: 1)
        _ = busy.frameReceived(frame("a"))
        _ = busy.frameReceived(frame("b"))
        let r18 = busy.stopReading()
        #expect(!r18)
        #expect(busy.state == .draining)
        let r19 = busy.readRequested()
        #expect(!r19)
        // Frames already read are still answered.
        let r20 = busy.requestFinished(now: start)
        #expect(r20.next == frame("b"))
        let r21 = busy.requestFinished(now: start)
        #expect(r21 == .init(close: true))
        #expect(busy.state == .closed)
    }

    @Test("a request finishing after the connection closed does nothing")
    func finishAfterClose() {
        var m = machine()
        _ = m.frameReceived(frame("a"))
        _ = m.frameReceived(frame("b"))
        m.closed()
        let r22 = m.requestFinished(now: start)
        #expect(r22 == .init())
        let r23 = m.frameReceived(frame("c"))
        #expect(r23 == nil)
    }

    @Test("the idle timer closes only a connection with nothing in flight and no bytes for idle_timeout")
    func idleTimeout() {
        var m = machine()
        let r24 = m.idleTimerFired(now: start + .seconds(299))
        #expect(r24 == .rearm(start + .seconds(300)))
        m.bytesReceived(framesCompleted: 1, bufferedBytes: 0, now: start + .seconds(100))
        _ = m.frameReceived(frame("a"))
        let r25 = m.idleTimerFired(now: start + .seconds(500))
        #expect(r25 == .rearm(start + .seconds(800)))
        _ = m.requestFinished(now: start + .seconds(600))
        let r26 = m.idleTimerFired(now: start + .seconds(800))
        #expect(r26 == .rearm(start + .seconds(900)))
        let r27 = m.idleTimerFired(now: start + .seconds(900))
        #expect(r27 == .close)
        #expect(m.state == .closed)
    }

    @Test("the frame timer closes a connection whose frame stays incomplete for frame_timeout")
    func slowloris() {
        var m = machine()
        m.bytesReceived(framesCompleted: 0, bufferedBytes: 2, now: start)
        #expect(m.frameDeadline == start + .seconds(10))
        // More bytes of the same frame do not extend its deadline.
        m.bytesReceived(framesCompleted: 0, bufferedBytes: 3, now: start + .seconds(5))
        let r28 = m.frameTimerFired(now: start + .seconds(5))
        #expect(r28 == .rearm(start + .seconds(10)))
        let r29 = m.frameTimerFired(now: start + .seconds(10))
        #expect(r29 == .close)
    }

    @Test("a new frame started after a complete one gets its own deadline; no partial frame disarms")
    func frameDeadlineMoves() {
        var m = machine()
        m.bytesReceived(framesCompleted: 0, bufferedBytes: 2, now: start)
        m.bytesReceived(framesCompleted: 3, bufferedBytes: 5, now: start + .seconds(8))
        let r30 = m.frameTimerFired(now: start + .seconds(10))
        #expect(r30 == .rearm(start + .seconds(18)))
        m.bytesReceived(framesCompleted: 1, bufferedBytes: 0, now: start + .seconds(11))
        #expect(m.frameDeadline == nil)
        let r31 = m.frameTimerFired(now: start + .seconds(20))
        #expect(r31 == .disarm)
    }

    @Test("while reads are held back, the delay is not the client's: no frame timeout, and a fresh clock after")
    func noFrameTimeoutUnderBackPressure() {
        var m = machine(maxInFlight: 1)
        _ = m.frameReceived(frame("a"))
        m.bytesReceived(framesCompleted: 1, bufferedBytes: 2, now: start)
        let r32 = m.readRequested()
        #expect(!r32)
        let r33 = m.frameTimerFired(now: start + .seconds(60))
        #expect(r33 == .rearm(start + .seconds(70)))
        let r34 = m.requestFinished(now: start + .seconds(61))
        #expect(r34 == .init(read: true))
        #expect(m.frameDeadline == start + .seconds(71))
    }
}
