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

    /// Makes the counters every run has, so that the families are exported from the start (and an
    /// issuer a reload adds has its own from then on): each issuer's `ok`, tokens routed to none,
    /// and each remote key set's fetches.
    func register(_ issuers: [IssuerKeys]) {
        for keys in issuers {
            count(issuer: keys.configuration.name, code: nil, by: 0)
            guard keys.status().isRemote else { continue }
            for result in ["ok", "error"] {
                Counter(label: "keyholed_key_set_fetches_total", dimensions: [("issuer", keys.configuration.name), ("result", result)])
                    .increment(by: 0)
            }
        }
        count(issuer: nil, code: .tokenIssuerUnknown, by: 0)
    }

    /// Counts a verification of a token routed to `issuer` (`nil`: to none): `code` nil when it verified.
    func count(issuer: String?, code: ProtocolError.Code?, by amount: Int = 1) {
        counter(issuer: issuer, code: code).increment(by: amount)
    }

    /// Counts a token `keys` vouched for, by the counter `keys` keeps once it is found by name.
    func countVerified(by keys: IssuerKeys) {
        keys.verifiedCounter.withLock { kept in
            if let kept { return kept }
            let found = counter(issuer: keys.configuration.name, code: nil)
            kept = found
            return found
        }.increment(by: 1)
    }

    /// The counter of verifications of tokens routed to `issuer` with the result `code`, made on first use.
    private func counter(issuer: String?, code: ProtocolError.Code?) -> Counter {
        let issuer = issuer ?? "none"
        let result = code?.rawValue ?? "ok"
        return counters.withLock { counters in
            if let counter = counters[issuer]?[result] { return counter }
            let counter = Counter(label: "keyholed_token_verifications_total", dimensions: [("issuer", issuer), ("result", result)])
            counters[issuer, default: [:]][result] = counter
            return counter
        }
    }
}
