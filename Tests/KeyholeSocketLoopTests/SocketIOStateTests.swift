import KeyholeSocketLoop
import Testing

@Suite("SocketIOState: what a connection's socket is watched for, without a socket")
struct SocketIOStateTests {
    let marks = SocketIOState.Marks(low: 100, high: 200)

    @Test("a new connection reads, is writable and watches for input only")
    func fresh() {
        let state = SocketIOState(marks: marks)
        #expect(state.watchingReads && !state.watchingWrites && state.writable && !state.closed)
    }

    @Test("back pressure: not reading stops watching input, once; reading again resumes it")
    func reading() {
        var state = SocketIOState(marks: marks)
        #expect(state.setReading(false) == .init(eventsChanged: true))
        #expect(!state.watchingReads)
        #expect(state.setReading(false) == .init())
        #expect(state.setReading(true) == .init(eventsChanged: true))
        #expect(state.watchingReads)
    }

    @Test("end of input: never watched for input again, whatever the owner wants")
    func endOfInput() {
        var state = SocketIOState(marks: marks)
        #expect(state.endOfInput() == .init(eventsChanged: true))
        #expect(state.setReading(true) == .init())
        #expect(!state.watchingReads)
        #expect(state.endOfInput() == .init())
    }

    @Test("an incomplete write watches for room until a write completes")
    func incompleteWrite() {
        var state = SocketIOState(marks: marks)
        #expect(state.wrote(unsent: 10) == .init(eventsChanged: true))
        #expect(state.watchingWrites)
        #expect(state.wrote(unsent: 5) == .init())
        #expect(state.wrote(unsent: 0) == .init(eventsChanged: true))
        #expect(!state.watchingWrites)
    }

    @Test("writability: lost above the high mark, back only below the low mark")
    func writabilityMarks() {
        var state = SocketIOState(marks: marks)
        #expect(state.queued(200) == nil)
        #expect(state.queued(201) == false)
        #expect(!state.writable)
        #expect(state.queued(150) == nil, "between the marks: still unwritable")
        #expect(state.wrote(unsent: 100) == .init(eventsChanged: true, writability: nil))
        #expect(state.wrote(unsent: 99) == .init(writability: true))
        #expect(state.writable)
        #expect(state.wrote(unsent: 0) == .init(eventsChanged: true))
    }

    @Test("close after writes: stops reading at once, closes when the last byte is sent")
    func closeAfterWrites() {
        var state = SocketIOState(marks: marks)
        #expect(state.closeAfterWrites(unsent: 50) == .init(eventsChanged: true, close: false))
        #expect(!state.watchingReads)
        #expect(state.setReading(true) == .init(), "reading stays off")
        #expect(state.wrote(unsent: 20) == .init(eventsChanged: true))
        #expect(state.wrote(unsent: 0) == .init(eventsChanged: true, close: true))
    }

    @Test("close after writes with nothing waiting closes at once; asking twice does nothing")
    func closeAfterWritesIdle() {
        var state = SocketIOState(marks: marks)
        #expect(state.closeAfterWrites(unsent: 0) == .init(eventsChanged: true, close: true))
        #expect(state.closeAfterWrites(unsent: 0) == .init())
    }

    @Test("while a write is incomplete, close after writes waits for it even with nothing new")
    func closeAfterWritesWaitsForIncompleteWrite() {
        var state = SocketIOState(marks: marks)
        _ = state.wrote(unsent: 10)
        #expect(state.closeAfterWrites(unsent: 10).close == false)
    }

    @Test("once closed, nothing changes")
    func closed() {
        var state = SocketIOState(marks: marks)
        _ = state.wrote(unsent: 10)
        state.close()
        #expect(state.closed && !state.watchingWrites && !state.watchingReads)
        #expect(state.setReading(false) == .init())
        #expect(state.wrote(unsent: 0) == .init())
        #expect(state.endOfInput() == .init())
        #expect(state.closeAfterWrites(unsent: 0) == .init())
    }
}
