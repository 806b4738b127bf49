import CoreMetrics
import Prometheus
import Synchronization
import Testing

@testable import KeyholeMetrics

@Suite struct AtomicHistogramTests {
    /// The text of `histograms`.
    static func text(_ histograms: AtomicHistograms) -> String {
        var text = ""
        histograms.emit(into: &text)
        return text
    }

    /// Durations around every request bucket's bound (one below, on it, one above), zero and ones past
    /// the last bound (negative ones are compared with literal lines below: swift-prometheus's text
    /// traps on a negative sum).
    static let durations: [Int64] = MetricsCatalogue.requestBuckets.flatMap { bound -> [Int64] in
        let nanoseconds = bound.components.seconds * 1_000_000_000 + bound.components.attoseconds / 1_000_000_000
        return [nanoseconds - 1, nanoseconds, nanoseconds + 1]
    } + [0, 7, 60_000_000_000, Int64(Int32.max) * 10]

    @Test func itsTextIsSwiftPrometheussForTheSameRecords() {
        let histograms = AtomicHistograms()
        let ours = histograms.histogram(
            name: "keyholed_request_duration_seconds", help: "Request time.", labels: [("op", "session.get")],
            buckets: MetricsCatalogue.requestBuckets)
        let registry = PrometheusCollectorRegistry()
        let theirs = registry.makeDurationHistogram(
            descriptor: MetricNameDescriptor(metricName: "keyholed_request_duration_seconds", unitName: "", helpText: "Request time."),
            labels: [("op", "session.get")], buckets: MetricsCatalogue.requestBuckets)
        for duration in Self.durations {
            ours.recordNanoseconds(duration)
            theirs.recordNanoseconds(duration)
        }
        // Every line, buckets, +Inf, _sum and _count, byte for byte; 0, 7 ns and 10 µs less 1 ns and on it in the first.
        #expect(Self.text(histograms) == registry.emitToString())
        #expect(Self.text(histograms).contains(#"keyholed_request_duration_seconds_bucket{op="session.get",le="0.00001"} 4"#))
    }

    @Test func aValueOnABoundCountsInThatBucketAndANegativeOneAsZero() {
        let histograms = AtomicHistograms()
        let histogram = histograms.histogram(
            name: "t_seconds", help: "T.", labels: [], buckets: [.microseconds(10), .microseconds(20)])
        histogram.recordNanoseconds(10_000)  // on the first bound
        histogram.recordNanoseconds(-5)  // a clock that went back: zero
        histogram.recordNanoseconds(10_001)
        histogram.recordNanoseconds(25_000)  // past every bound
        let lines = Self.text(histograms).split(separator: "\n")
        #expect(lines == [
            "# HELP t_seconds T.", "# TYPE t_seconds histogram",
            #"t_seconds_bucket{le="0.00001"} 2"#, #"t_seconds_bucket{le="0.00002"} 3"#, #"t_seconds_bucket{le="+Inf"} 4"#,
            "t_seconds_sum 0.000045001", "t_seconds_count 4",
        ])
    }

    @Test func theSameLabelsGiveTheSameSeriesAndValuesAreEscaped() {
        let histograms = AtomicHistograms()
        let first = histograms.histogram(name: "t_seconds", help: "T.\nmore \\", labels: [("op", "a\"b\\c\nd")], buckets: [.seconds(1)])
        let again = histograms.histogram(name: "t_seconds", help: "T.", labels: [("op", "a\"b\\c\nd")], buckets: [.seconds(1)])
        let other = histograms.histogram(name: "t_seconds", help: "T.", labels: [("op", "x")], buckets: [.seconds(1)])
        #expect(first === again)
        #expect(first !== other)
        first.recordNanoseconds(1)
        again.recordNanoseconds(2)
        let text = Self.text(histograms)
        #expect(text.hasPrefix("# HELP t_seconds T.\\nmore \\\\\n# TYPE t_seconds histogram\n"))
        #expect(text.contains(#"t_seconds_count{op="a\"b\\c\nd"} 2"#))
        #expect(text.contains(#"t_seconds_count{op="x"} 0"#))
        // One family: its HELP and TYPE lines once.
        #expect(text.split(separator: "\n").filter { $0.hasPrefix("# TYPE t_seconds") }.count == 1)
    }

    @Test func recordsFromManyThreadsAreAllCounted() async {
        let histograms = AtomicHistograms()
        let histogram = histograms.histogram(
            name: "t_seconds", help: "T.", labels: [], buckets: MetricsCatalogue.requestBuckets)
        let threads = 8
        let each = 20_000
        await withTaskGroup(of: Void.self) { group in
            for thread in 0..<threads {
                group.addTask {
                    for index in 0..<each { histogram.recordNanoseconds(Int64((index * 37 + thread) % 3_000_000)) }
                }
            }
        }
        var sum: Int64 = 0
        for thread in 0..<threads {
            for index in 0..<each { sum += Int64((index * 37 + thread) % 3_000_000) }
        }
        let text = Self.text(histograms)
        #expect(text.contains("t_seconds_count \(threads * each)\n"))
        #expect(text.contains(#"t_seconds_bucket{le="+Inf"} \#(threads * each)"# + "\n"))
        #expect(text.contains("t_seconds_sum \(Duration.nanoseconds(sum).bucketRepresentation)\n"))
    }

    @Test("a capped duration and more after it keep the sum positive, and the text is made")
    func hugeDurations() {
        let histograms = AtomicHistograms()
        let histogram = histograms.histogram(name: "t_seconds", help: "T.", labels: [], buckets: [.seconds(1)])
        histogram.recordNanoseconds(.max)  // what swift-metrics records for an infinite duration
        histogram.recordNanoseconds(3)
        let text = Self.text(histograms)
        // 2^63 - 1 + 3 ns: past Int64.max (a signed sum went negative here, and the text trapped).
        #expect(text.contains("t_seconds_sum 9223372036.85477581\n"))
        #expect(text.contains(#"t_seconds_bucket{le="1.0"} 1"#))
        #expect(text.contains("t_seconds_count 2\n"))
    }

    @Test("a timer the catalogue does not list goes to the registry, which cleans its name and labels")
    func otherTimers() {
        let factory = KeyholeMetricsFactory(registry: PrometheusCollectorRegistry())
        Timer(label: "http.server.duration", dimensions: [("http.method", "GET")], factory: factory).recordNanoseconds(1)
        Timer(label: "keyholed_log_sync_duration_seconds", dimensions: [], factory: factory).recordNanoseconds(1)
        let text = MetricsExporter(factory: factory, version: "1").text()
        // Outside the help text (which names the label as recorded), only the cleaned name.
        #expect(!text.split(separator: "\n").contains { !$0.hasPrefix("# HELP") && $0.contains("http.") })
        #expect(text.contains("# TYPE http_server_duration histogram\n"))
        #expect(text.contains(#"http_server_duration_count{http_method="GET"} 1"#))
        // The catalogue's own: one family, with its disk buckets (from 50 µs).
        #expect(text.contains(#"keyholed_log_sync_duration_seconds_bucket{le="0.00005"} 1"#))
        #expect(text.split(separator: "\n").filter { $0.hasPrefix("# TYPE keyholed_log_sync_duration_seconds ") }.count == 1)
    }
}
