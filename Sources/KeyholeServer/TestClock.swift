import KeyholeProtocol
import Synchronization

/// A clock that stands still until told to move: what `--fixed-clock` gives keyholed, so that a test
/// can make tokens, states and sessions expire without waiting (`debug.advance_clock`).
///
/// Only ever forward: a clock that went back would let a spent state or an expired session look new,
/// which no test needs and which would hide the bugs such a test looks for.
public final class TestClock: Sendable {
    private let seconds: Mutex<Double>

    /// A clock that reads `start` (seconds since 1970) until advanced.
    public init(start: Double) {
        seconds = Mutex(start)
    }

    /// The time it reads now.
    public var now: Double { seconds.withLock { $0 } }

    /// Moves the clock forward by `seconds`; the time it reads afterwards.
    @discardableResult
    public func advance(by seconds: Double) -> Double {
        precondition(seconds >= 0, "a TestClock only moves forward")
        return self.seconds.withLock { now in
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
                let now = clock.advance(by: Double(seconds))
                return ["now": .int(Int64(now.rounded(.down)))]
            }
        ]
    }
}
