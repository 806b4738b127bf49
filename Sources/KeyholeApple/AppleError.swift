import KeyholeProtocol

/// Why a request to Apple failed: Apple refused it (`rejected`, with Apple's OAuth error), or it did
/// not get a usable answer (`unavailable`, worth retrying). Never contains a token or a secret.
///
/// Two errors are equal when their codes, and Apple's errors, are.
public struct AppleError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Code: Sendable, Equatable {
        case rejected
        case unavailable
    }

    private let code: Code
    /// For people: what happened and what to check.
    public let message: String
    /// Apple's `error` member (`invalid_grant`, `invalid_client`, ...) when Apple refused.
    public let appleError: String?
    /// How long to wait before trying again, when worth it, in milliseconds.
    public let retryAfterMs: Int?

    private init(_ code: Code, _ message: String, appleError: String? = nil, retryAfterMs: Int? = nil) {
        self.code = code
        self.message = message
        self.appleError = appleError
        self.retryAfterMs = retryAfterMs
    }

    /// Apple answered with the OAuth error `appleError`: repeating the request will not help.
    public static func rejected(_ appleError: String, _ message: String) -> AppleError {
        AppleError(.rejected, message, appleError: appleError)
    }

    /// Apple could not be reached, timed out, failed (5xx, 429) or answered nonsense.
    public static func unavailable(_ message: String, retryAfterMs: Int) -> AppleError {
        AppleError(.unavailable, message, retryAfterMs: retryAfterMs)
    }

    /// Whether Apple refused (as opposed to not answering usably).
    public var isRejected: Bool { code == .rejected }

    /// Whether Apple said the grant (code or refresh token) is no longer valid: for a refresh token,
    /// that the user withdrew consent or the token was revoked.
    public var isInvalidGrant: Bool { code == .rejected && appleError == "invalid_grant" }

    /// The protocol's error for this failure: `upstream_rejected` or `upstream_unavailable`.
    public var protocolError: ProtocolError {
        switch code {
        case .rejected: .upstreamRejected(message, appleError: appleError ?? "unknown")
        case .unavailable: .upstreamUnavailable(message, retryAfterMs: retryAfterMs ?? 1000)
        }
    }

    /// `rejected (invalid_grant): message` or `unavailable: message`.
    public var description: String {
        switch code {
        case .rejected: "rejected (\(appleError ?? "unknown")): \(message)"
        case .unavailable: "unavailable: \(message)"
        }
    }

    /// Equality by code (and Apple's error).
    public static func == (lhs: AppleError, rhs: AppleError) -> Bool {
        lhs.code == rhs.code && lhs.appleError == rhs.appleError
    }
}
