import KeyholeProtocol
import Synchronization

/// Wakes a background loop early: the loop waits for a ring or a timeout, whichever comes first. Every
/// ring is also kept for the next wait, which then returns at once: none is lost between a pass and
/// its wait, at the price of an extra pass now and then.
final class Doorbell: Sendable {
    private struct State {
        var waiter: FirstOutcome<Void>?
        var rung = false
    }

    private let state = Mutex(State())

    /// Wakes the waiter, or the next one.
    func ring() {
        state.withLock { state -> FirstOutcome<Void>? in
            state.rung = true
            defer { state.waiter = nil }
            return state.waiter
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
