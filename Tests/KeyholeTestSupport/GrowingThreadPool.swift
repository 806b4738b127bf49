import Dispatch
import Foundation
import Synchronization
import Glibc

/// A task executor with a thread for every job that runs at once: a job goes to an idle thread, or
/// to a new one when none is idle. A thread idle for `idleTimeout` ends.
///
/// For tests that block (`OwnThreadsTrait`): a blocked job holds only its own thread, never one of
/// the few cooperative threads every other test's tasks wait for. How many tests use it at once is
/// bounded by the trait, not here.
package final class GrowingThreadPool: TaskExecutor, Sendable {
    /// The pool the `ownThreads` trait runs tests on.
    package static let shared = GrowingThreadPool(idleTimeout: .seconds(10))

    /// One thread: its next job is put in `handed`, and `wake` wakes it to run it.
    private final class Worker: Sendable {
        let wake = DispatchSemaphore(value: 0)
        let handed = Mutex<UnownedJob?>(nil)
    }

    private static let marker = "GrowingThreadPool"

    /// Whether the caller runs on one of a pool's threads.
    package static var isCurrentThreadOwn: Bool { Thread.current.threadDictionary[marker] as? Bool == true }

    /// How long a thread waits for a job before it ends, in seconds (as `DispatchSemaphore` takes it).
    private let idleSeconds: Double
    /// Threads waiting for a job, the latest idle last (it is handed the next job: its stack is warm).
    private let idle = Mutex<[Worker]>([])
    private let started = Atomic<Int>(0)

    package init(idleTimeout: Duration) {
        idleSeconds = Double(idleTimeout.components.seconds) + Double(idleTimeout.components.attoseconds) / 1e18
    }

    /// How many threads the pool has started so far.
    package var threadsStarted: Int { started.load(ordering: .relaxed) }

    package func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        if let worker = idle.withLock({ $0.popLast() }) {
            worker.handed.withLock { $0 = job }
            worker.wake.signal()
            return
        }
        started.add(1, ordering: .relaxed)
        let worker = Worker()
        Self.startThread {
            Thread.current.threadDictionary[Self.marker] = true
            self.work(as: worker, first: job)
        }
    }

    /// A detached thread running `body`. Not Foundation's `Thread.start()`: it ignores a failed
    /// `pthread_create`, and the job handed to the thread that never was would never run, its test
    /// waiting forever. Here a thread that cannot be started stops the test process with the reason.
    private static func startThread(_ body: @escaping @Sendable () -> Void) {
        let box = Unmanaged.passRetained(ThreadBody(body)).toOpaque()
        var thread = pthread_t()
        let status = pthread_create(&thread, nil, { argument in
            let body = Unmanaged<ThreadBody>.fromOpaque(argument!).takeRetainedValue()
            body.run()
            return nil
        }, box)
        guard status == 0 else {
            Unmanaged<ThreadBody>.fromOpaque(box).release()
            fatalError("GrowingThreadPool: pthread_create failed (\(String(cString: strerror(status)))): a job would never run")
        }
        pthread_detach(thread)
    }

    /// What a new thread runs, carried across `pthread_create`'s untyped argument.
    private final class ThreadBody: Sendable {
        let run: @Sendable () -> Void
        init(_ run: @escaping @Sendable () -> Void) { self.run = run }
    }

    private func work(as worker: Worker, first: UnownedJob) {
        var job = first
        while true {
            job.runSynchronously(on: asUnownedTaskExecutor())
            idle.withLock { $0.append(worker) }
            if worker.wake.wait(timeout: .now() + idleSeconds) == .timedOut {
                let stillIdle = idle.withLock { workers in
                    guard let index = workers.firstIndex(where: { $0 === worker }) else { return false }
                    workers.remove(at: index)
                    return true
                }
                if stillIdle { return }
                // Taken off the idle list just as it timed out: its job is on the way.
                worker.wake.wait()
            }
            guard let next = worker.handed.withLock({ $0.take() }) else {
                preconditionFailure("a worker was woken without a job")
            }
            job = next
        }
    }
}
