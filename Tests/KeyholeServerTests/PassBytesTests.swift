import Testing

@testable import KeyholeServer

/// The bytes a loop's connections write in a pass, added to the server's count as the pass ends.
@Suite("PassBytes")
struct PassBytesTests {
    @Test("nothing reaches the total before the pass ends; then all of it, once, and the next pass starts from nothing")
    func recordedAsThePassEnds() {
        let total = ServerStats.Counter()
        let pass = PassBytes(total: total)
        pass.pending.pointee &+= 120
        pass.pending.pointee &+= 7
        #expect(total.current == 0)
        pass.record()
        #expect(total.current == 127 && pass.pending.pointee == 0)
        // A pass that wrote nothing adds nothing.
        pass.record()
        #expect(total.current == 127)
        pass.pending.pointee &+= 1
        pass.record()
        #expect(total.current == 128)
    }
}
