import Synchronization

/// The factory's timers (`AtomicHistogram`s), by family, for the exporter's text: swift-prometheus's
/// registry holds the counters and gauges, these the histograms recorded on every request.
public final class AtomicHistograms: Sendable {
    private struct Family {
        var help: String
        /// Series by their rendered labels, in the order they were made.
        var series: [String: AtomicHistogram] = [:]
        var order: [String] = []
    }

    private let families = Mutex<[String: Family]>([:])

    /// An empty set.
    public init() {}

    /// The series of `name` with `labels`: the one made before with the same labels, else a new one
    /// with `buckets` (as swift-prometheus's registry does, so that a handle made twice counts once).
    func histogram(name: String, help: String, labels: [(String, String)], buckets: [Duration]) -> AtomicHistogram {
        let key = AtomicHistogram.render(labels)
        return families.withLock { families in
            var family = families[name] ?? Family(help: help)
            if let existing = family.series[key] { return existing }
            let histogram = AtomicHistogram(name: name, labels: labels, buckets: buckets)
            family.series[key] = histogram
            family.order.append(key)
            families[name] = family
            return histogram
        }
    }

    /// Every family in Prometheus's text format, `# HELP` and `# TYPE` first, families by name.
    public func emit(into text: inout String) {
        let families = families.withLock { $0 }
        for name in families.keys.sorted() {
            let family = families[name]!
            let help = AtomicHistogram.escape(family.help, quotes: false)
            text += "# HELP \(name) \(help)\n# TYPE \(name) histogram\n"
            for key in family.order { family.series[key]!.emit(into: &text) }
        }
    }
}
