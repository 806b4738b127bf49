import KeyholeProtocol
import Synchronization

/// A clock that stands still until told to move: what `--fixed-clock` gives keyholed, so that a test
/// can make tokens, states and sessions expire without waiting (`debug.advance_clock`).
///
/// Only ever forward: a clock that went back would let a spent state or an expired session look new,
/// which no test needs and which would hide the bugs such a test looks for.
public final class TestClock: Sendable {
    private let seconds: Mutex<Double>

    /// The latest moment it may read: the last second of 9999, which every time computation in
    /// keyholed (an expiry of now plus a lifetime, as Int64) survives.
    public static let latest: Double = 253_402_300_799

    /// A clock that reads `start` (seconds since 1970, finite, `0...latest`) until advanced.
    public init(start: Double) {
        precondition(start.isFinite && (0...Self.latest).contains(start), "a TestClock starts between 1970 and 9999")
        seconds = Mutex(start)
    }

    /// The time it reads now.
    public var now: Double { seconds.withLock { $0 } }

    /// Moves the clock forward by `seconds`; the time it reads afterwards, or `nil` (and the clock
    /// left as it was) when that would be past `latest`.
    @discardableResult
    public func advance(by seconds: Double) -> Double? {
        precondition(seconds >= 0, "a TestClock only moves forward")
        return self.seconds.withLock { now in
            guard now + seconds <= Self.latest else { return nil }
            now += seconds
            return now
        }
    }
}

extension BuiltinOperations {
    /// `debug.advance_clock`, offered with `--enable-debug-ops` when keyholed runs on a `TestClock`.
    static func clock(_ clock: TestClock) -> [String: Operation] {
        [
            "debug.advance_clock": .sync { request, _ throws(ProtocolError) in
                var arguments = Arguments(request)
                guard let seconds = try arguments.int("s", in: 0...(10 * 365 * 86_400)) else { throw .badRequest("'s' is required") }
                try arguments.finish()
                guard let now = clock.advance(by: Double(seconds)) else {
                    throw .badRequest("the clock would pass the end of 9999")
                }
                return ["now": .int(Int64(now.rounded(.down)))]
            }
        ]
    }
}
