import CoreMetrics
import Prometheus

/// swift-metrics' factory for keyholed: metrics go into `registry`, with the help text and
/// buckets `MetricsCatalogue` gives its name. swift-prometheus's own factory registers metrics
/// without help (swift-metrics has none to pass), and a family must have one help text throughout.
/// A name the catalogue lacks (a library's) is exported with a help text saying so. The catalogue's
/// histograms are `AtomicHistogram`s, kept in `timers`: one is recorded on every request, and the
/// registry's own histograms take a lock for it. Any other timer (a library's) goes to the registry,
/// which checks and cleans its name, labels and help as it does for every other metric, so that a
/// name recorded both ways cannot make the text name a family twice. `MetricsExporter` writes both
/// into one text.
public struct KeyholeMetricsFactory: MetricsFactory {
    /// Where counters and gauges go.
    public let registry: PrometheusCollectorRegistry
    /// Where timers go.
    public let timers: AtomicHistograms

    /// A factory for `registry`, with timers of its own.
    public init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
        self.timers = AtomicHistograms()
    }

    static func help(_ label: String) -> String {
        MetricsCatalogue.metrics[label]?.help ?? "\(label), recorded through swift-metrics."
    }

    static func descriptor(_ label: String) -> MetricNameDescriptor {
        MetricNameDescriptor(metricName: label, unitName: "", helpText: help(label))
    }

    public func makeCounter(label: String, dimensions: [(String, String)]) -> any CounterHandler {
        registry.makeCounter(descriptor: Self.descriptor(label), labels: dimensions)
    }

    public func makeFloatingPointCounter(label: String, dimensions: [(String, String)]) -> any FloatingPointCounterHandler {
        registry.makeCounter(descriptor: Self.descriptor(label), labels: dimensions)
    }

    public func makeRecorder(label: String, dimensions: [(String, String)], aggregate: Bool) -> any RecorderHandler {
        registry.makeGauge(descriptor: Self.descriptor(label), labels: dimensions)
    }

    public func makeMeter(label: String, dimensions: [(String, String)]) -> any MeterHandler {
        registry.makeGauge(descriptor: Self.descriptor(label), labels: dimensions)
    }

    public func makeTimer(label: String, dimensions: [(String, String)]) -> any TimerHandler {
        guard case .histogram(let buckets)? = MetricsCatalogue.metrics[label]?.kind else {
            return registry.makeDurationHistogram(descriptor: Self.descriptor(label), labels: dimensions, buckets: MetricsCatalogue.requestBuckets)
        }
        return timers.histogram(name: label, help: Self.help(label), labels: dimensions, buckets: buckets)
    }

    // Handles live as long as keyholed: nothing is ever destroyed.
    public func destroyCounter(_ handler: any CounterHandler) {}
    public func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {}
    public func destroyRecorder(_ handler: any RecorderHandler) {}
    public func destroyMeter(_ handler: any MeterHandler) {}
    public func destroyTimer(_ handler: any TimerHandler) {}
}
