import Synchronization

/// The timers of every database call's bound (`Deadline`), kept together and looked at every `tick`
/// by one task, rather than one `Task.sleep` per call: a sleep registers a timer with Dispatch's
/// manager thread and cancels it again, a thread wake-up each, on every call of the hot paths
/// (measured: about a tenth of keyholed's CPU on a cache miss). A bound fires up to one tick late,
/// far within what a `timeout` of at least 100 ms means.
final class DeadlineWheel: Sendable {
    private struct State {
        var entries: [UInt64: (deadline: ContinuousClock.Instant, fire: @Sendable () -> Void)] = [:]
        var nextID: UInt64 = 0
        /// Whether the task that looks at the entries is running (it ends when none is left).
        var ticking = false
    }

    /// The wheel every store's calls share.
    static let shared = DeadlineWheel(tick: .milliseconds(20))

    let tick: Duration
    private let state = Mutex(State())

    init(tick: Duration) {
        self.tick = tick
    }

    /// Calls `fire` once `deadline` has passed, unless `cancel` is called with the returned id first.
    func add(deadline: ContinuousClock.Instant, _ fire: @escaping @Sendable () -> Void) -> UInt64 {
        let (id, start) = state.withLock { state -> (UInt64, Bool) in
            state.nextID += 1
            state.entries[state.nextID] = (deadline, fire)
            defer { state.ticking = true }
            return (state.nextID, !state.ticking)
        }
        if start { Task.detached { await self.run() } }
        return id
    }

    /// Forgets entry `id` (its call ended first).
    func cancel(_ id: UInt64) {
        _ = state.withLock { $0.entries.removeValue(forKey: id) }
    }

    /// Entries pending now: for the tests.
    var count: Int { state.withLock { $0.entries.count } }

    private func run() async {
        while true {
            try? await Task.sleep(for: tick)
            let now = ContinuousClock.now
            let due = state.withLock { state -> [@Sendable () -> Void]? in
                let fired = state.entries.filter { $0.value.deadline <= now }
                for id in fired.keys { state.entries[id] = nil }
                if state.entries.isEmpty && fired.isEmpty {
                    state.ticking = false
                    return nil
                }
                return fired.values.map(\.fire)
            }
            guard let due else { return }
            for fire in due { fire() }
        }
    }
}
