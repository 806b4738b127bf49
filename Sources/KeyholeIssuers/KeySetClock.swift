#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Wall-clock time for the key-set cache: when keys were fetched, when they expire, when to refresh.
///
/// Injected, so that tests drive a time to live of an hour, a 30 s cool-down or a week of staleness
/// by moving a manual clock instead of waiting.
public protocol KeySetClock: Sendable {
    /// Seconds since 1970.
    func now() -> Double
    /// Returns once `now()` has reached `deadline`; throws `CancellationError` when the task is cancelled.
    func sleep(until deadline: Double) async throws
}

/// The system's real-time clock.
public struct SystemKeySetClock: KeySetClock {
    /// The clock.
    public init() {}

    /// `CLOCK_REALTIME` in seconds.
    public func now() -> Double {
        var time = timespec()
        clock_gettime(CLOCK_REALTIME, &time)
        return Double(time.tv_sec) + Double(time.tv_nsec) / 1e9
    }

    /// Sleeps for the time left until `deadline`; a wall-clock jump while asleep shifts the wake-up by
    /// that much, which only moves a refresh, never the expiry check (done against `now()` when used).
    public func sleep(until deadline: Double) async throws {
        let left = deadline - now()
        guard left > 0 else { return }
        try await Task.sleep(for: .nanoseconds(Int64(min(left, 365 * 86_400) * 1e9)))
    }
}
