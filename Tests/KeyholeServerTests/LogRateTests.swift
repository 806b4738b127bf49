import NIOCore
import Testing

@testable import KeyholeServer

@Suite("Log rate")
struct LogRateTests {
    @Test("an event logs its burst, then its rate; the next line out says how many were held back; events count apart")
    func heldBack() {
        var rate = LogRate()
        rate.linesPerSecond = 2
        rate.burst = 3
        let start = NIODeadline.uptimeNanoseconds(1_000_000_000)
        var admitted: [Int?] = []
        for _ in 0..<5 { admitted.append(rate.admit("connection.bad_frame", now: start)) }
        #expect(admitted == [0, 0, 0, nil, nil])
        // Another event has a bucket of its own.
        let other = rate.admit("access.denied", now: start)
        #expect(other == 0)
        // Half a second later one more goes, reporting the two held back.
        let later = rate.admit("connection.bad_frame", now: start + .milliseconds(500))
        #expect(later == 2)
        let again = rate.admit("connection.bad_frame", now: start + .milliseconds(500))
        #expect(again == nil)
        let quiet = rate.admit("connection.bad_frame", now: start + .seconds(10))
        #expect(quiet == 1)
    }
}
