import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// Several `SocketLoop`s serving one listening socket: each connection lives on the loop that
/// accepted it. Started once, ended once (`quiesce` or `stop`), then awaited with `finished()`.
public final class SocketLoopGroup: Sendable {
    /// The loops, `keyhole-loop-0` and on.
    public let loops: [SocketLoop]
    private let state = Mutex(State())

    private struct State {
        var running = 0
        var waiters: [CheckedContinuation<Void, Never>] = []
        var listening = 0
        var listenerClosed: (@Sendable () -> Void)?
    }

    /// `count` loops, not yet started.
    public init(count: Int, configuration: SocketLoop.Configuration = SocketLoop.Configuration()) throws(SocketLoopError) {
        precondition(count >= 1, "a group has at least one loop")
        var loops: [SocketLoop] = []
        for index in 0..<count {
            loops.append(try SocketLoop(name: "keyhole-loop-\(index)", configuration: configuration))
        }
        self.loops = loops
    }

    /// Starts the loops, which accept connections from `fd` (listening) and hand each to `accepted` on
    /// its loop's thread. `failed` hears accept(2)'s errors; `released` runs once no loop watches `fd`
    /// any more (at `quiesce` or `stop`), so that the caller may close it.
    public func start(
        listeningOn fd: CInt,
        accepted: @escaping @Sendable (SocketConnection) -> Void,
        failed: @escaping @Sendable (CInt) -> Void,
        released: @escaping @Sendable () -> Void
    ) {
        // O_NONBLOCK: EPOLLEXCLUSIVE may still wake two loops for one connection, and the one that
        // finds none must not block in accept(2).
        let flags = fcntl(fd, F_GETFL)
        _ = fcntl(fd, F_SETFL, flags | O_NONBLOCK)
        state.withLock { state in
            state.running = loops.count
            state.listening = loops.count
            state.listenerClosed = released
        }
        for loop in loops {
            loop.start { [self] in self.loopFinished() }
            loop.execute { [self] in
                loop.listen(
                    on: fd, accepted: accepted, failed: failed,
                    released: { self.loopReleasedListener() })
            }
        }
    }

    /// Graceful shutdown of every loop (`SocketLoop.quiesce`).
    public func quiesce() {
        for loop in loops {
            loop.execute { loop.quiesce() }
        }
    }

    /// Ends every loop at once (`SocketLoop.stop`).
    public func stop() {
        for loop in loops {
            loop.execute { loop.stop() }
        }
    }

    /// Returns once every loop's thread has ended.
    public func finished() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLock { state in
                if state.running == 0 { return true }
                state.waiters.append(continuation)
                return false
            }
            if done { continuation.resume() }
        }
    }

    /// Runs `body` on `loop` once every loop of the group has waited and handled its events
    /// (`SocketLoop.afterNextWait`): every hang-up the kernel signalled to any loop before this call
    /// has been seen. Safe from any thread; a loop that ends settles its part as it ends (but one
    /// asked as it ends may never run, as with `SocketLoop.afterNextWait`).
    public func afterEveryLoopWaited(thenOn loop: SocketLoop, _ body: @escaping @Sendable () -> Void) {
        let left = Countdown(loops.count)
        for each in loops {
            each.afterNextWait {
                if left.count.subtract(1, ordering: .acquiringAndReleasing).newValue == 0 {
                    loop.execute(body)
                }
            }
        }
    }

    /// Whether any loop's thread still runs.
    public var isRunning: Bool { state.withLock { $0.running > 0 } }

    private func loopFinished() {
        let waiters = state.withLock { state -> [CheckedContinuation<Void, Never>] in
            state.running -= 1
            guard state.running == 0 else { return [] }
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume() }
    }

    private func loopReleasedListener() {
        let released = state.withLock { state -> (@Sendable () -> Void)? in
            state.listening -= 1
            guard state.listening == 0 else { return nil }
            defer { state.listenerClosed = nil }
            return state.listenerClosed
        }
        released?()
    }
}

/// The loops yet to settle an `afterEveryLoopWaited`.
private final class Countdown: Sendable {
    let count: Atomic<Int>

    init(_ count: Int) { self.count = Atomic(count) }
}
