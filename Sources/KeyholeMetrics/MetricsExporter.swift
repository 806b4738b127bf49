import Prometheus
import Synchronization

/// The metrics text (Prometheus exposition format 0.0.4): what was recorded through swift-metrics
/// into `registry` and `timers`, and figures read from their owners when the text is made (`collectors`).
public final class MetricsExporter: Sendable {
    /// Where recorded counters and gauges, and read metrics, go.
    public let registry: PrometheusCollectorRegistry
    /// Where recorded timers go.
    public let timers: AtomicHistograms
    private let collectors: Mutex<[@Sendable (inout Reading) -> Void]>
    private let mirrored = Mutex<[String: (counter: Prometheus.Counter, total: Double)]>([:])
    /// The gauges the last reading set: one it no longer has (an issuer a reload removed) is dropped.
    private let gauges = Mutex<[String: Prometheus.Gauge]>([:])

    /// What a collector says when the text is made.
    public struct Reading {
        fileprivate var gauges: [(String, [(String, String)], Double)] = []
        fileprivate var totals: [(String, [(String, String)], Double)] = []

        /// A gauge's value now.
        public mutating func gauge(_ name: String, _ labels: [(String, String)] = [], _ value: Double) {
            gauges.append((name, labels, value))
        }

        /// A counter kept elsewhere: its total so far (exported as a counter that follows it).
        public mutating func total(_ name: String, _ labels: [(String, String)] = [], _ value: Int) {
            totals.append((name, labels, Double(value)))
        }

        /// A counter kept elsewhere, in a unit with fractions (seconds).
        public mutating func total(_ name: String, _ labels: [(String, String)] = [], _ value: Double) {
            totals.append((name, labels, value))
        }
    }

    /// An exporter of what `factory` makes; `version` goes into `keyholed_build_info`.
    public init(factory: KeyholeMetricsFactory, version: String) {
        self.registry = factory.registry
        self.timers = factory.timers
        self.collectors = Mutex([])
        registry.makeGauge(descriptor: KeyholeMetricsFactory.descriptor("keyholed_build_info"), labels: [("version", version)]).set(to: 1.0)
        add(ProcessMetrics.read(into:))
    }

    /// Adds a collector, run each time the text is made.
    public func add(_ collector: @escaping @Sendable (inout Reading) -> Void) {
        collectors.withLock { $0.append(collector) }
    }

    private static func key(_ name: String, _ labels: [(String, String)]) -> String {
        name + labels.map { "\u{0}\($0.0)\u{0}\($0.1)" }.joined()
    }

    /// The text now.
    public func text() -> String {
        var reading = Reading()
        for collector in collectors.withLock({ $0 }) { collector(&reading) }
        gauges.withLock { gauges in
            var current: [String: Prometheus.Gauge] = [:]
            for (name, labels, value) in reading.gauges {
                let key = Self.key(name, labels)
                let gauge = gauges[key] ?? registry.makeGauge(descriptor: KeyholeMetricsFactory.descriptor(name), labels: labels)
                gauge.set(to: value)
                current[key] = gauge
            }
            for (key, gauge) in gauges where current[key] == nil { registry.unregisterGauge(gauge) }
            gauges = current
        }
        mirrored.withLock { mirrored in
            for (name, labels, total) in reading.totals {
                let key = Self.key(name, labels)
                var entry = mirrored[key]
                    ?? (registry.makeCounter(descriptor: KeyholeMetricsFactory.descriptor(name), labels: labels), 0)
                // A total that went down (a restart of its owner) starts the counter over from there.
                let step = total - entry.total
                // Whole steps stay integers in the text (a count of syncs reads 5, not 5.0).
                if step > 0 && step == step.rounded() {
                    entry.counter.increment(by: Int64(step))
                } else if step > 0 {
                    entry.counter.increment(by: step)
                }
                entry.total = total
                mirrored[key] = entry
            }
        }
        var bytes: [UInt8] = []
        registry.emit(into: &bytes)
        var text = String(decoding: bytes, as: UTF8.self)
        timers.emit(into: &text)
        return text
    }
}
