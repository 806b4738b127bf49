import KeyholeProtocol
import KeyholeStore
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import KeyholeServer

/// Answers completed on another thread reach the event loop: once, never inline, and in bursts.
@Suite("Pending answers")
struct PendingAnswerTests {
    /// Collects what receivers get, and on which thread.
    final class Received: Sendable {
        let values = Mutex<[(Int64, Bool)]>([])
        let done: EventLoopPromise<Void>
        let expected: Int

        init(expected: Int, on eventLoop: any EventLoop) {
            self.expected = expected
            done = eventLoop.makePromise()
        }

        func receiver(_ eventLoop: any EventLoop) -> PendingAnswer.Receiver {
            { outcome in
                let value: Int64
                switch outcome {
                case .success(.object(let result)): value = result["n"]?.intValue ?? -1
                case .success(.encoded): value = -2
                case .failure: value = -3
                }
                let count = self.values.withLock { values in
                    values.append((value, eventLoop.inEventLoop))
                    return values.count
                }
                if count == self.expected { self.done.succeed() }
            }
        }
    }

    @Test("completed before anyone waits: delivered later, on the event loop, not inside whenComplete")
    func completedFirst() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let delivery = AnswerDelivery { loop.execute($0) }
        let received = Received(expected: 1, on: loop)
        let pending = PendingAnswer()
        pending.complete(.success(.object(["n": 7])))
        pending.complete(.success(.object(["n": 8])))
        let inline = try await loop.submit {
            pending.whenComplete(on: delivery, received.receiver(loop))
            // Still on the loop's task: the receiver has not run yet.
            return received.values.withLock { $0.count }
        }.get()
        #expect(inline == 0)
        try await received.done.futureResult.get()
        #expect(received.values.withLock { $0.map(\.0) } == [7])
        #expect(received.values.withLock { $0.allSatisfy { $0.1 } })
        try await group.shutdownGracefully()
    }

    @Test("a burst completed on another thread arrives whole, in order, once each, on the event loop")
    func burst() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loop = group.next()
        let other = group.next()
        let delivery = AnswerDelivery { loop.execute($0) }
        let received = Received(expected: 200, on: loop)
        let answers = (0..<200).map { _ in PendingAnswer() }
        for answer in answers { answer.whenComplete(on: delivery, received.receiver(loop)) }
        try await other.submit {
            for (n, answer) in answers.enumerated() {
                answer.complete(n % 50 == 49 ? .failure(.storageUnavailable("disk")) : .success(.object(["n": .int(Int64(n))])))
                answer.complete(.success(.object(["n": -9])))
            }
        }.get()
        try await received.done.futureResult.get()
        let values = received.values.withLock { $0 }
        let expected: [Int64] = (0..<200).map { n in n % 50 == 49 ? -3 : Int64(n) }
        #expect(values.map(\.0) == expected)
        #expect(values.allSatisfy { $0.1 })
        try await group.shutdownGracefully()
    }

    @Test("complete(encoding:) writes into the room reserved where the answer was made, once")
    func reservedRoom() async throws {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        let loop = group.next()
        let delivery = AnswerDelivery { loop.execute($0) }
        let got = Mutex<[ByteBuffer]>([])
        let done = loop.makePromise(of: Void.self)
        let reserved = PendingAnswer(reserving: 1024), plain = PendingAnswer()
        for answer in [reserved, plain] {
            answer.whenComplete(on: delivery) { outcome in
                var buffer = ByteBuffer()
                if case .success(.encoded(let encoded)) = outcome { buffer = encoded } else { Issue.record("not encoded: \(outcome)") }
                if got.withLock({ $0.append(buffer); return $0.count }) == 2 { done.succeed() }
            }
        }
        try await group.next().submit {
            for answer in [reserved, plain] {
                answer.complete { $0.writeString("{\"n\":1}") }
                answer.complete { $0.writeString("{\"n\":2}") }
            }
        }.get()
        try await done.futureResult.get()
        let buffers = got.withLock { $0 }
        #expect(buffers.map { String(buffer: $0) } == ["{\"n\":1}", "{\"n\":1}"])
        // The reserved answer's bytes are in the room made with it; the other grew its own.
        #expect(buffers[0].capacity >= 1024 && buffers[1].capacity < 1024)
        try await group.shutdownGracefully()
    }

    /// Runs what it is handed only when the test says, counting the wake-ups.
    final class HeldLoop: Sendable {
        let jobs = Mutex<[@Sendable () -> Void]>([])
        func execute(_ job: @escaping @Sendable () -> Void) { jobs.withLock { $0.append(job) } }
        func runAll() { for job in jobs.withLock({ held in defer { held = [] }; return held }) { job() } }
    }

    @Test("answers completed in a burst wake their loop once, at its end; a room nobody used is freed on the loop")
    func burstWakesOnce() {
        let loop = HeldLoop()
        let delivery = AnswerDelivery { loop.execute($0) }
        let got = Mutex<[String]>([])
        let found = PendingAnswer(reserving: 1024), missing = PendingAnswer(reserving: 1024), plain = PendingAnswer()
        for answer in [found, missing, plain] {
            answer.whenComplete(on: delivery) { outcome in
                let text: String
                switch outcome {
                case .success(.encoded(let buffer)): text = String(buffer: buffer)
                case .success(.object): text = "object"
                case .failure(let error): text = error.code.rawValue
                }
                got.withLock { $0.append(text) }
            }
        }
        CompletionBurst.run {
            found.complete { $0.writeString("{}") }
            missing.complete(.failure(.sessionNotFound()))
            plain.complete(.success(.object([:])))
            // Queued, and no wake-up asked for yet.
            #expect(loop.jobs.withLock { $0.count } == 0)
        }
        #expect(loop.jobs.withLock { $0.count } == 1)
        #expect(missing.holdsRoom && !found.holdsRoom)
        loop.runAll()
        #expect(got.withLock { $0 } == ["{}", "session_not_found", "object"])
        // The unused room is dropped by the delivery, on the loop.
        #expect(!missing.holdsRoom)
        // Outside a burst, the first answer wakes the loop at once.
        let later = PendingAnswer()
        later.whenComplete(on: delivery) { _ in got.withLock { $0.append("later") } }
        later.complete(.success(.object([:])))
        #expect(loop.jobs.withLock { $0.count } == 1)
        loop.runAll()
        #expect(got.withLock { $0.last } == "later")
    }
}
