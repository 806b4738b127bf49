import KeyholeProtocol
import Synchronization

/// The `jti` of the notifications applied, each remembered for as long as its token is accepted, so
/// that Apple's retries (it sends again until the app answers 200) and replays are applied once. In memory only:
/// after a restart a repeat is applied again, which every event type tolerates.
final class SeenNotifications: Sendable {
    private struct State {
        // By bytes: two ids that differ only in Unicode normalisation are two notifications.
        var expiries: [ExactString: Int64] = [:]
    }

    /// The most remembered at once; past it the soonest to expire go first.
    let capacity: Int
    private let state = Mutex(State())

    init(capacity: Int = 100_000) {
        self.capacity = capacity
    }

    /// Remembers `jti` until `expiresAt` unless it is already; returns whether it was not (the
    /// caller then applies the notification).
    func claim(_ jti: String, until expiresAt: Int64, now: Int64) -> Bool {
        state.withLock { state in
            let key = ExactString(jti)
            if let known = state.expiries[key], known > now { return false }
            state.expiries[key] = expiresAt
            Self.prune(&state, capacity: capacity, now: now)
            return true
        }
    }

    /// Forgets `jti` (its notification could not be applied).
    func release(_ jti: String) {
        _ = state.withLock { $0.expiries.removeValue(forKey: ExactString(jti)) }
    }

    private static func prune(_ state: inout State, capacity: Int, now: Int64) {
        guard state.expiries.count > capacity else { return }
        state.expiries = state.expiries.filter { $0.value > now }
        guard state.expiries.count > capacity else { return }
        // Rare (a flood of valid notifications): drop the soonest to expire, a tenth at once.
        let dropped = state.expiries.sorted { $0.value < $1.value }.prefix(state.expiries.count - capacity + capacity / 10)
        for (key, _) in dropped { state.expiries[key] = nil }
    }

    /// How many are remembered.
    var count: Int { state.withLock { $0.expiries.count } }
}
