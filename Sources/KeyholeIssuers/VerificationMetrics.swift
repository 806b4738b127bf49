import CoreMetrics
import KeyholeProtocol
import Synchronization

/// Token verifications by issuer and result, and the verified-token cache's hits and misses
/// (Sources/KeyholeMetrics/METRICS.md). Issuer names come from the configuration (`none` before a
/// token is routed to one) and results from the closed list of codes: the counters are bounded, and
/// each is made on first use and kept.
final class VerificationMetrics: Sendable {
    /// One for the process: the metrics system is too.
    static let shared = VerificationMetrics()

    let cacheHits = Counter(label: "keyholed_verified_token_cache_hits_total")
    let cacheMisses = Counter(label: "keyholed_verified_token_cache_misses_total")
    private let counters = Mutex<[String: [String: Counter]]>([:])

    /// Makes the counters every run has (each issuer's `ok`, and tokens routed to none), so that the
    /// families are exported from the start.
    func register(issuers: [String]) {
        for issuer in issuers { count(issuer: issuer, code: nil, by: 0) }
        count(issuer: nil, code: .tokenIssuerUnknown, by: 0)
    }

    /// Counts a verification of a token routed to `issuer` (`nil`: to none): `code` nil when it verified.
    func count(issuer: String?, code: ProtocolError.Code?, by amount: Int = 1) {
        let issuer = issuer ?? "none"
        let result = code?.rawValue ?? "ok"
        counters.withLock { counters in
            if let counter = counters[issuer]?[result] { return counter }
            let counter = Counter(label: "keyholed_token_verifications_total", dimensions: [("issuer", issuer), ("result", result)])
            counters[issuer, default: [:]][result] = counter
            return counter
        }.increment(by: amount)
    }
}
