import CoreMetrics
import Prometheus
import Synchronization

/// A duration histogram recorded without a lock: swift-metrics' `Timer` for keyholed's factory.
///
/// Every request records one (`keyholed_request_duration_seconds`), on every loop. swift-prometheus's
/// `Histogram` takes a lock and compares the duration, as a 128-bit `Duration`, with every bucket's
/// bound on each record: about 150 ns of the 250 ns `keyhole-bench metrics-cost` measured for a
/// request's whole recording. Here a record finds its one bucket among nanosecond bounds and adds
/// to it and to the sum, both relaxed atomic additions; the cumulative counts Prometheus wants are
/// summed when the text is made. The text is the one swift-prometheus writes for its histograms
/// (the same `le` and sum representation), so scrapes, dashboards and tests see no difference.
///
/// A scrape reads the counts one by one while records go on: a request recorded meanwhile may be in
/// its bucket and not yet in the sum, or the other way round, for one scrape. The buckets and
/// `_count` are always consistent with each other (`_count` is the `+Inf` bucket, summed from the
/// same reads), and never go down from one scrape to the next.
///
/// The sum is unsigned: a duration swift-metrics caps at `Int64.max` (an infinite one) and anything
/// after it must not make it negative, which swift-prometheus's text cannot write (it traps).
final class AtomicHistogram: TimerHandler, @unchecked Sendable {
    // @unchecked: the two buffers are allocated once, in init, never reassigned and freed in deinit;
    // `bounds` is only read, and every count is touched through its Atomic.

    /// The family's name, and this series' labels as the text shows them (`op="ping"`), or empty.
    let name: String
    let renderedLabels: String
    let bucketBounds: [Duration]
    /// Each bucket's upper bound in nanoseconds, ascending: a value counts in the first bucket whose
    /// bound is at least the value (Prometheus's `le`); past the last, only in `+Inf`.
    private let bounds: UnsafeMutableBufferPointer<Int64>
    /// One count per bound, then the count above every bound: not cumulative.
    private let counts: UnsafeMutablePointer<Atomic<Int>>
    private let sum = Atomic<UInt64>(0)

    init(name: String, labels: [(String, String)], buckets: [Duration]) {
        self.name = name
        self.renderedLabels = Self.render(labels)
        self.bucketBounds = buckets.sorted()
        bounds = .allocate(capacity: bucketBounds.count)
        for (index, bound) in bucketBounds.enumerated() {
            let (seconds, attoseconds) = bound.components
            bounds[index] = seconds &* 1_000_000_000 &+ attoseconds / 1_000_000_000
        }
        counts = .allocate(capacity: bucketBounds.count + 1)
        for index in 0...bucketBounds.count {
            (counts + index).initialize(to: Atomic(0))
        }
    }

    deinit {
        bounds.deallocate()
        counts.deinitialize(count: bucketBounds.count + 1)
        counts.deallocate()
    }

    /// Counts one duration. Negative ones (a clock that went back) count as zero.
    func recordNanoseconds(_ duration: Int64) {
        let value = max(duration, 0)
        var index = 0
        while index < bounds.count, value > bounds[index] { index &+= 1 }
        counts[index].wrappingAdd(1, ordering: .relaxed)
        sum.wrappingAdd(UInt64(value), ordering: .relaxed)
    }

    /// The series' lines in Prometheus's text format: each bucket (cumulative), `+Inf`, `_sum`, `_count`.
    func emit(into text: inout String) {
        let prefix = renderedLabels.isEmpty ? "" : renderedLabels + ","
        let braced = renderedLabels.isEmpty ? " " : "{\(renderedLabels)} "
        var total = 0
        for (index, bound) in bucketBounds.enumerated() {
            total += counts[index].load(ordering: .relaxed)
            text += "\(name)_bucket{\(prefix)le=\"\(bound.bucketRepresentation)\"} \(total)\n"
        }
        total += counts[bucketBounds.count].load(ordering: .relaxed)
        text += "\(name)_bucket{\(prefix)le=\"+Inf\"} \(total)\n"
        let nanoseconds = sum.load(ordering: .relaxed)
        let seconds = Duration(
            secondsComponent: Int64(nanoseconds / 1_000_000_000), attosecondsComponent: Int64(nanoseconds % 1_000_000_000) * 1_000_000_000)
        text += "\(name)_sum\(braced)\(seconds.bucketRepresentation)\n"
        text += "\(name)_count\(braced)\(total)\n"
    }

    /// `name="value",…` with each value escaped as the text format wants (backslash, quote, newline).
    static func render(_ labels: [(String, String)]) -> String {
        labels.map { name, value in "\(name)=\"\(escape(value, quotes: true))\"" }.joined(separator: ",")
    }

    /// `text` with backslashes and newlines escaped, and quotes too for a label value (HELP keeps them).
    static func escape(_ text: String, quotes: Bool) -> String {
        var escaped = ""
        for character in text.unicodeScalars {
            switch character {
            case "\\": escaped += "\\\\"
            case "\"" where quotes: escaped += "\\\""
            case "\n": escaped += "\\n"
            default: escaped.unicodeScalars.append(character)
            }
        }
        return escaped
    }
}
