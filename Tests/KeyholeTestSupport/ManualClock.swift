import KeyholeIssuers
import Synchronization

/// A clock that moves only when the test says so; sleepers wake when it passes their deadline.
package final class ManualClock: KeySetClock {
    private struct Sleeper {
        let id: Int
        let deadline: Double
        let continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now: Double
        var nextID = 0
        var sleepers: [Sleeper] = []
        var watchers: [(predicate: @Sendable ([Double]) -> Bool, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let state: Mutex<State>

    package init(now: Double) { state = Mutex(State(now: now)) }

    package func now() -> Double { state.withLock { $0.now } }

    package func sleep(until deadline: Double) async throws {
        let id = state.withLock { state in
            defer { state.nextID += 1 }
            return state.nextID
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let (outcome, watchers) = state.withLock { state -> (Result<Void, any Error>?, [CheckedContinuation<Void, Never>]) in
                    if Task.isCancelled { return (.failure(CancellationError()), []) }
                    if deadline <= state.now { return (.success(()), []) }
                    state.sleepers.append(Sleeper(id: id, deadline: deadline, continuation: continuation))
                    return (nil, Self.readyWatchers(&state))
                }
                for watcher in watchers { watcher.resume() }
                if let outcome { continuation.resume(with: outcome) }
            }
        } onCancel: {
            let sleeper = state.withLock { state -> Sleeper? in
                guard let index = state.sleepers.firstIndex(where: { $0.id == id }) else { return nil }
                return state.sleepers.remove(at: index)
            }
            sleeper?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves the clock to `time` and wakes every sleeper whose deadline it reached.
    package func advance(to time: Double) {
        let ready = state.withLock { state -> [Sleeper] in
            state.now = max(state.now, time)
            let now = state.now
            let ready = state.sleepers.filter { $0.deadline <= now }
            state.sleepers.removeAll { $0.deadline <= now }
            return ready
        }
        for sleeper in ready { sleeper.continuation.resume() }
    }

    /// Moves the clock on by `seconds`.
    package func advance(by seconds: Double) { advance(to: now() + seconds) }

    /// Returns once the deadlines of the tasks asleep satisfy `predicate` (say, a timer armed for a time).
    package func waitForSleepers(_ predicate: @escaping @Sendable ([Double]) -> Bool) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let holds = state.withLock { state -> Bool in
                if predicate(state.sleepers.map(\.deadline)) { return true }
                state.watchers.append((predicate, continuation))
                return false
            }
            if holds { continuation.resume() }
        }
    }

    private static func readyWatchers(_ state: inout State) -> [CheckedContinuation<Void, Never>] {
        let deadlines = state.sleepers.map(\.deadline)
        var ready: [CheckedContinuation<Void, Never>] = []
        state.watchers.removeAll { watcher in
            guard watcher.predicate(deadlines) else { return false }
            ready.append(watcher.continuation)
            return true
        }
        return ready
    }
}
