import KeyholeProtocol

/// Latency percentiles of a run, in microseconds (depth 1: each request's time to its answer).
struct Percentiles: CustomStringConvertible {
    let count: Int
    let p50: UInt32
    let p90: UInt32
    let p99: UInt32
    let p999: UInt32
    let max: UInt32

    /// `nil` for no samples.
    init?(_ samples: [UInt32]) {
        guard !samples.isEmpty else { return nil }
        let sorted = samples.sorted()
        // Nearest rank: the smallest sample with at least that share of samples at or below it.
        func rank(_ share: Double) -> UInt32 {
            sorted[Swift.max(0, Swift.min(sorted.count - 1, Int((share * Double(sorted.count)).rounded(.up)) - 1))]
        }
        count = sorted.count
        p50 = rank(0.5)
        p90 = rank(0.9)
        p99 = rank(0.99)
        p999 = rank(0.999)
        max = sorted[sorted.count - 1]
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
