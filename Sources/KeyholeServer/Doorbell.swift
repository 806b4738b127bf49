import KeyholeIssuers
import Synchronization

/// Wakes a background loop early: the loop waits for a ring or a timeout, whichever comes first. A
/// ring while nobody waits is kept for the next wait, so none is lost between a pass and its wait.
final class Doorbell: Sendable {
    private struct State {
        var waiter: FirstOutcome<Void>?
        var rung = false
    }

    private let state = Mutex(State())

    /// Wakes the waiter, or the next one.
    func ring() {
        state.withLock { state -> FirstOutcome<Void>? in
            guard let waiter = state.waiter else {
                state.rung = true
                return nil
            }
            state.waiter = nil
            return waiter
        }?.finish(())
    }

    /// Returns on a ring (at once if one came since the last wait), after `timeout`, or when the
    /// task is cancelled. One waiter at a time.
    func wait(upTo timeout: Duration) async {
        let waiter = FirstOutcome<Void>()
        let rung = state.withLock { state in
            defer { state.rung = false }
            if !state.rung { state.waiter = waiter }
            return state.rung
        }
        guard !rung else { return }
        let timer = Task {
            try? await Task.sleep(for: timeout)
            waiter.finish(())
        }
        await withTaskCancellationHandler {
            await waiter.wait()
        } onCancel: {
            waiter.finish(())
        }
        timer.cancel()
        state.withLock { state in
            if state.waiter === waiter { state.waiter = nil }
        }
    }
}
