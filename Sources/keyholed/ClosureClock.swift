import KeyholeIssuers

/// keyholed's clock (the real one, or a test's `--fixed-clock`) where a component reads time through
/// a `KeySetClock`: Apple's client secrets are dated by it, so that with a fixed clock Apple (a
/// test's fake) sees the same time as every token, state and session.
///
/// Waits are on real time: `sleep(until:)` sleeps the difference between the deadline and `now()`.
/// The key-set cache keeps `SystemKeySetClock` (its refresh schedule runs on real time even under
/// a fixed clock, as KeySetEndToEndTests expects).
struct ClosureClock: KeySetClock {
    let read: @Sendable () -> Double

    func now() -> Double { read() }

    func sleep(until deadline: Double) async throws {
        // On real time, for as long as this clock has left to go.
        let system = SystemKeySetClock()
        try await system.sleep(until: system.now() + (deadline - now()))
    }
}
