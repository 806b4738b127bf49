import CoreMetrics

/// Sessions created and revoked, and Sign in with Apple's notifications by type
/// (Sources/KeyholeMetrics/METRICS.md): counted once the change is durable, where each kind of
/// change is answered. Handles made once; `ServerMetrics` makes them when the server is built, so
/// that every family is exported from the start.
enum SessionMetrics {
    static let created = Counter(label: "keyholed_sessions_created_total")
    static let revoked = revokedCounter("revoke")
    static let revokedAll = revokedCounter("revoke_all")
    static let userDeleted = revokedCounter("user_deleted")
    static let consentRevoked = revokedCounter("consent_revoked")

    /// The notification types keyholed acts on; any other counts as `other`.
    static let notificationTypes = ["consent-revoked", "account-delete", "account-deleted", "email-enabled", "email-disabled"]
    static let notifications: [String: Counter] = Dictionary(uniqueKeysWithValues: (notificationTypes + ["other"]).map {
        ($0, Counter(label: "keyholed_apple_notifications_total", dimensions: [("type", $0)]))
    })

    private static func revokedCounter(_ reason: String) -> Counter {
        Counter(label: "keyholed_sessions_revoked_total", dimensions: [("reason", reason)])
    }

    /// Counts `count` sessions revoked in `counter`.
    static func count(_ count: Int, in counter: Counter) {
        if count > 0 { counter.increment(by: count) }
    }

    /// Counts a notification accepted, by its event type.
    static func notification(_ type: String) {
        (notifications[type] ?? notifications["other"])?.increment()
    }

    /// Makes every handle now.
    static func register() {
        _ = (created, revoked, revokedAll, userDeleted, consentRevoked, notifications)
    }
}
