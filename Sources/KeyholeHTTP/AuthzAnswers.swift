import CoreMetrics
import NIOHTTP1

/// `/authz`'s answers by result, `keyholed_authz_answers_total` (METRICS.md): handles made once.
final class AuthzAnswers: Sendable {
    let ok = AuthzAnswers.counter("ok")
    let unauthorized = AuthzAnswers.counter("unauthorized")
    let forbidden = AuthzAnswers.counter("forbidden")
    let unavailable = AuthzAnswers.counter("unavailable")
    let badRequest = AuthzAnswers.counter("bad_request")
    /// The peer may not ask (its access groups lack `authz`).
    let denied = AuthzAnswers.counter("denied")

    private static func counter(_ result: String) -> Counter {
        Counter(label: "keyholed_authz_answers_total", dimensions: [("result", result)])
    }

    /// Counts an answer of `/authz` by its status.
    func count(_ status: HTTPResponseStatus) {
        switch status {
        case .ok: ok.increment()
        case .unauthorized: unauthorized.increment()
        case .forbidden: forbidden.increment()
        case .serviceUnavailable: unavailable.increment()
        default: badRequest.increment()
        }
    }
}
