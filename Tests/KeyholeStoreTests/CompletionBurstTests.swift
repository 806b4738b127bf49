import Dispatch
import KeyholeStore
import Synchronization
import Testing

/// Wakes asked for in a burst run once it ends, on the thread that asked; outside one, at once.
@Suite("completion bursts")
struct CompletionBurstTests {
    @Test("outside a burst a wake runs at once; inside, at the outermost burst's end, in order")
    func deferred() {
        var order: [String] = []
        CompletionBurst.wake { order.append("alone") }
        #expect(order == ["alone"])
        let value = CompletionBurst.run { () -> Int in
            CompletionBurst.wake { order.append("a") }
            CompletionBurst.run {
                CompletionBurst.wake { order.append("b") }
            }
            // The inner burst ended, the outer has not: nothing ran yet.
            order.append("body")
            return 7
        }
        #expect(value == 7)
        #expect(order == ["alone", "body", "a", "b"])
        // A later burst starts empty.
        CompletionBurst.run { order.append("second") }
        #expect(order == ["alone", "body", "a", "b", "second"])
    }

    @Test("a wake that asks for more runs them at once, and a burst it starts ends on its own")
    func reentrant() {
        var order: [String] = []
        CompletionBurst.run {
            CompletionBurst.wake {
                order.append("first")
                CompletionBurst.wake { order.append("asked by the first") }
                CompletionBurst.run {
                    CompletionBurst.wake { order.append("in a burst the first started") }
                    order.append("that burst's body")
                }
            }
        }
        #expect(order == ["first", "asked by the first", "that burst's body", "in a burst the first started"])
        CompletionBurst.run { CompletionBurst.wake { order.append("next") } }
        #expect(order.last == "next" && order.count == 5)
    }

    @Test("a burst ended by a throw still runs its wakes")
    func thrown() {
        struct Failure: Error {}
        var woken = 0
        #expect(throws: Failure.self) {
            try CompletionBurst.run {
                CompletionBurst.wake { woken += 1 }
                throw Failure()
            }
        }
        #expect(woken == 1)
    }

    final class Counter: Sendable {
        let count = Atomic(0)
    }

    @Test("a burst on one thread defers nothing on another")
    func perThread() {
        let woken = Counter()
        CompletionBurst.run {
            // Another thread's wake, asked for while this thread is in a burst, runs at once.
            let done = DispatchSemaphore(value: 0)
            DispatchQueue(label: "another thread").async {
                CompletionBurst.wake { woken.count.add(1, ordering: .relaxed) }
                done.signal()
            }
            done.wait()
            #expect(woken.count.load(ordering: .relaxed) == 1)
        }
    }
}
