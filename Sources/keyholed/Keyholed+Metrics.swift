import CoreMetrics
import KeyholeIssuers
import KeyholeMetrics
import KeyholeProtocol
import KeyholeServer
import KeyholeStore
import Prometheus

extension Keyholed {
    /// Points swift-metrics at keyholed's factory (Sources/KeyholeMetrics/METRICS.md), unless
    /// `[metrics] enabled = false`; the exporter makes the text from what it holds either way.
    static func bootstrapMetrics(enabled: Bool) -> MetricsExporter {
        let factory = KeyholeMetricsFactory(registry: PrometheusCollectorRegistry())
        if enabled { MetricsSystem.bootstrap(factory) }
        return MetricsExporter(factory: factory, version: KeyholeVersion.current)
    }

    /// The figures read when the text is made: they are kept by their owners already.
    static func collectMetrics(
        _ exporter: MetricsExporter, server: KeyholeServer, store: Store?, registry: IssuerRegistry,
        apple: (revocations: AppleRevocations, refreshChecks: AppleRefreshChecks)?, sharedStoreUp: (@Sendable () -> Bool)? = nil
    ) {
        exporter.add { reading in
            reading.gauge("keyholed_connections_open", [], Double(server.openConnections))
            if let store {
                let figures = store.statistics
                reading.gauge("keyholed_users", [], Double(figures.users))
                reading.gauge("keyholed_sessions", [], Double(figures.sessions))
                reading.gauge("keyholed_log_bytes", [], Double(figures.walBytes))
                reading.gauge("keyholed_storage_up", [], figures.failure == nil ? 1 : 0)
                reading.total("keyholed_log_syncs_total", [], figures.syncs)
                reading.total("keyholed_snapshots_total", [], figures.snapshots)
            } else if let sharedStoreUp {
                // PostgreSQL: up while this host's view is fresh; its figures are the database's own.
                reading.gauge("keyholed_storage_up", [], sharedStoreUp() ? 1 : 0)
            }
            for keys in registry.issuers {
                let status = keys.status()
                reading.gauge("keyholed_key_set_keys", [("issuer", status.issuer)], Double(status.keyCount))
                reading.gauge("keyholed_key_set_last_success_timestamp_seconds", [("issuer", status.issuer)], status.fetchedAt ?? 0)
            }
            if let apple {
                let revocations = apple.revocations.figures
                reading.gauge("keyholed_apple_revocations_owed", [], Double(revocations.pending))
                reading.total("keyholed_apple_revocations_sent_total", [], revocations.done)
                reading.total("keyholed_apple_revocations_failed_total", [], revocations.failures)
                let checks = apple.refreshChecks.figures
                reading.total("keyholed_apple_refresh_checks_total", [("result", "ok")], checks.ok)
                reading.total("keyholed_apple_refresh_checks_total", [("result", "consent_revoked")], checks.consentRevoked)
                reading.total("keyholed_apple_refresh_checks_total", [("result", "failed")], checks.failures)
            }
        }
    }
}
