import CoreMetrics
import Prometheus

/// swift-metrics' factory for keyholed: every metric goes into `registry`, with the help text and
/// buckets `MetricsCatalogue` gives its name. swift-prometheus's own factory registers metrics
/// without help (swift-metrics has none to pass), and a family must have one help text throughout.
/// A name the catalogue lacks (a library's) is exported with a help text saying so.
public struct KeyholeMetricsFactory: MetricsFactory {
    /// Where the metrics go.
    public let registry: PrometheusCollectorRegistry

    /// A factory for `registry`.
    public init(registry: PrometheusCollectorRegistry) {
        self.registry = registry
    }

    static func descriptor(_ label: String) -> MetricNameDescriptor {
        let help = MetricsCatalogue.metrics[label]?.help ?? "\(label), recorded through swift-metrics."
        return MetricNameDescriptor(metricName: label, unitName: "", helpText: help)
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
        let buckets: [Duration] = if case .histogram(let buckets)? = MetricsCatalogue.metrics[label]?.kind { buckets } else { MetricsCatalogue.requestBuckets }
        return registry.makeDurationHistogram(descriptor: Self.descriptor(label), labels: dimensions, buckets: buckets)
    }

    // Handles live as long as keyholed: nothing is ever destroyed.
    public func destroyCounter(_ handler: any CounterHandler) {}
    public func destroyFloatingPointCounter(_ handler: any FloatingPointCounterHandler) {}
    public func destroyRecorder(_ handler: any RecorderHandler) {}
    public func destroyMeter(_ handler: any MeterHandler) {}
    public func destroyTimer(_ handler: any TimerHandler) {}
}
