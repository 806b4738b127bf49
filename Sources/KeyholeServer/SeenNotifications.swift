import Synchronization

/// The `jti` of the notifications applied, each remembered until its token expires, so that Apple's
/// retries (it sends again until the app answers 200) and replays are applied once. In memory only:
/// after a restart a repeat is applied again, which every event type tolerates.
final class SeenNotifications: Sendable {
    private struct State {
        var expiries: [String: Int64] = [:]
    }

    /// The most remembered at once; past it the soonest to expire go first.
    let capacity: Int
    private let state = Mutex(State())

    init(capacity: Int = 100_000) {
        self.capacity = capacity
    }

    /// Whether `jti` was applied and has not expired by `now`.
    func contains(_ jti: String, now: Int64) -> Bool {
        state.withLock { state in state.expiries[jti].map { $0 > now } ?? false }
    }

    /// Remembers `jti` until `expiresAt`.
    func insert(_ jti: String, until expiresAt: Int64, now: Int64) {
        state.withLock { state in
            state.expiries[jti] = expiresAt
            guard state.expiries.count > capacity else { return }
            state.expiries = state.expiries.filter { $0.value > now }
            if state.expiries.count > capacity {
                // Rare (a flood of valid notifications): drop the soonest to expire, a tenth at once.
                let dropped = state.expiries.sorted { $0.value < $1.value }.prefix(state.expiries.count - capacity + capacity / 10)
                for (key, _) in dropped { state.expiries[key] = nil }
            }
        }
    }

    /// How many are remembered.
    var count: Int { state.withLock { $0.expiries.count } }
}
