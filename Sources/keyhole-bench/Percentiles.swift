import Histogram
import KeyholeProtocol

/// Latency percentiles of a run, in microseconds: each request's time from being sent to its answer.
struct Percentiles: CustomStringConvertible {
    let count: UInt64
    let p50: UInt64
    let p90: UInt64
    let p99: UInt64
    let p999: UInt64
    let max: UInt64

    /// A histogram as `load` records latencies in: microseconds, three significant digits (values
    /// within 0.1 % of each other share a bucket), up to a minute (longer waits count as a minute).
    static func histogram() -> Histogram<UInt64> {
        Histogram(highestTrackableValue: 60_000_000, numberOfSignificantValueDigits: .three)
    }

    /// `nil` for an empty histogram.
    init?(_ histogram: Histogram<UInt64>) {
        guard histogram.totalCount > 0 else { return nil }
        count = histogram.totalCount
        p50 = histogram.valueAtPercentile(50)
        p90 = histogram.valueAtPercentile(90)
        p99 = histogram.valueAtPercentile(99)
        p999 = histogram.valueAtPercentile(99.9)
        max = histogram.max
    }

    var json: JSONValue {
        [
            "samples": .int(Int64(count)), "p50": .int(Int64(p50)), "p90": .int(Int64(p90)),
            "p99": .int(Int64(p99)), "p99_9": .int(Int64(p999)), "max": .int(Int64(max)),
        ]
    }

    var description: String {
        "p50 \(p50) µs, p90 \(p90) µs, p99 \(p99) µs, p99.9 \(p999) µs, max \(max) µs (\(count) samples)"
    }
}
