import CoreMetrics
import Prometheus
import Synchronization
import Testing

@testable import KeyholeMetrics

@Suite struct MetricsExporterTests {
    /// The value of `series` in `text`.
    static func value(_ text: String, _ series: String) -> String? {
        text.split(separator: "\n").first { $0.hasPrefix(series + " ") }.map { String($0.dropFirst(series.count + 1)) }
    }

    @Test func theFactoryGivesEachFamilyItsHelpAndBuckets() {
        let factory = KeyholeMetricsFactory(registry: PrometheusCollectorRegistry())
        Counter(label: "keyholed_sessions_created_total", dimensions: [], factory: factory).increment(by: 2)
        Timer(label: "keyholed_request_duration_seconds", dimensions: [("op", "ping")], factory: factory).recordNanoseconds(30_000)
        Counter(label: "some_library_total", dimensions: [], factory: factory).increment()
        let text = MetricsExporter(factory: factory, version: "1").text()
        #expect(text.contains("# HELP keyholed_sessions_created_total Sessions created.\n"))
        #expect(Self.value(text, "keyholed_sessions_created_total") == "2")
        // 30 µs falls in the 50 µs bucket, not the 25 µs one.
        #expect(Self.value(text, #"keyholed_request_duration_seconds_bucket{op="ping",le="0.000025"}"#) == "0")
        #expect(Self.value(text, #"keyholed_request_duration_seconds_bucket{op="ping",le="0.00005"}"#) == "1")
        #expect(text.contains("# HELP some_library_total some_library_total, recorded through swift-metrics.\n"))
        #expect(text.contains("# HELP keyholed_request_duration_seconds Time from a request's frame to its answer, by operation.\n"
            + "# TYPE keyholed_request_duration_seconds histogram\n"))
    }

    @Test func totalsKeptElsewhereAreFollowedAndNeverGoBack() {
        let exporter = MetricsExporter(factory: KeyholeMetricsFactory(registry: PrometheusCollectorRegistry()), version: "1.2.3")
        let total = Mutex(5)
        exporter.add { reading in
            reading.total("keyholed_log_syncs_total", [], total.withLock { $0 })
            reading.gauge("keyholed_users", [], 42)
        }
        #expect(Self.value(exporter.text(), "keyholed_log_syncs_total") == "5")
        total.withLock { $0 = 7 }
        #expect(Self.value(exporter.text(), "keyholed_log_syncs_total") == "7")
        // The owner started over (3): the counter stays, then goes on from there.
        total.withLock { $0 = 3 }
        #expect(Self.value(exporter.text(), "keyholed_log_syncs_total") == "7")
        total.withLock { $0 = 4 }
        let text = exporter.text()
        #expect(Self.value(text, "keyholed_log_syncs_total") == "8")
        #expect(Self.value(text, "keyholed_users") == "42.0")
        #expect(Self.value(text, #"keyholed_build_info{version="1.2.3"}"#) == "1.0")
        #expect(Self.value(text, "process_open_fds").flatMap(Double.init) ?? 0 > 0)
        #expect(Self.value(text, "process_resident_memory_bytes").flatMap(Double.init) ?? 0 > 1_000_000)
    }

    @Test func aGaugeTheOwnerNoLongerReadsIsDropped() {
        let exporter = MetricsExporter(factory: KeyholeMetricsFactory(registry: PrometheusCollectorRegistry()), version: "1")
        let issuers = Mutex(["apple", "google"])
        exporter.add { reading in
            for issuer in issuers.withLock({ $0 }) { reading.gauge("keyholed_key_set_keys", [("issuer", issuer)], 3) }
        }
        let before = exporter.text()
        #expect(Self.value(before, #"keyholed_key_set_keys{issuer="google"}"#) == "3.0")
        // A reload removed google: its gauge goes, apple's stays.
        issuers.withLock { $0 = ["apple"] }
        let after = exporter.text()
        #expect(Self.value(after, #"keyholed_key_set_keys{issuer="google"}"#) == nil)
        #expect(Self.value(after, #"keyholed_key_set_keys{issuer="apple"}"#) == "3.0")
    }

    @Test func everyCatalogueNameFollowsPrometheusConventions() {
        for (name, entry) in MetricsCatalogue.metrics {
            #expect(name.hasPrefix("keyholed_") || name.hasPrefix("process_"), "\(name)")
            switch entry.kind {
            case .counter: #expect(name.hasSuffix("_total"), "\(name)")
            case .histogram: #expect(name.hasSuffix("_seconds"), "\(name)")
            case .gauge: #expect(!name.hasSuffix("_total"), "\(name)")
            }
            #expect(!entry.help.isEmpty)
        }
    }
}
