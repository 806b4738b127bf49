/// A failure of the client itself, with one of the client-side codes of PROTOCOL.md section 8 (which
/// keyholed never sends). keyholed's own error answers are `ProtocolError`s.
///
/// | `code` | meaning | had the request an effect? |
/// |---|---|---|
/// | `unavailable` | keyholed could not be reached before the deadline | no: it was never sent |
/// | `connection_lost` | the connection ended after the request was written, and it is not safe to repeat (or its one re-send was lost too) | unknown |
/// | `timeout` | the deadline passed; the connection stays open and a late answer is dropped | unknown once written |
/// | `protocol_error` | keyholed's answer broke the protocol; the connection was closed | unknown |
///
/// Two errors are equal when their codes are: messages may change between releases.
public struct KeyholeClientError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: String, Hashable, Sendable {
        case unavailable
        case connectionLost = "connection_lost"
        case timeout
        case protocolError = "protocol_error"
    }

    private let base: Code
    /// What went wrong, for people; never parse it.
    public let message: String

    private init(_ base: Code, _ message: String) {
        self.base = base
        self.message = message
    }

    /// The stable code: `unavailable`, `connection_lost`, `timeout` or `protocol_error`.
    public var code: String { base.rawValue }
    /// Always `nil`: the client's own failures carry no retry hint (keyholed's do, on `ProtocolError`).
    public var retryAfterMs: Int? { nil }

    /// Equality by code only.
    public static func == (lhs: KeyholeClientError, rhs: KeyholeClientError) -> Bool { lhs.base == rhs.base }
    /// Hashes the code only.
    public func hash(into hasher: inout Hasher) { hasher.combine(base) }
    /// `code: message`.
    public var description: String { "\(code): \(message)" }

    /// `unavailable`: keyholed could not be reached before the deadline; the request was never sent.
    public static func unavailable(_ message: String) -> KeyholeClientError {
        KeyholeClientError(.unavailable, message)
    }
    /// `unavailable`, saying which socket and why.
    public static func cannotConnect(_ path: String, _ reason: String) -> KeyholeClientError {
        .unavailable("cannot connect to \(path): \(reason)")
    }
    /// `connection_lost`: the connection ended after the request was written; its outcome is unknown.
    public static let connectionLost = KeyholeClientError(
        .connectionLost,
        "the connection to keyholed ended before the answer arrived; the request may or may not have taken effect")
    /// The same as `connectionLost` (its earlier name).
    public static let connectionClosed = connectionLost
    /// `timeout`: no answer before the call's deadline; the request may or may not have taken effect.
    public static let timeout = KeyholeClientError(
        .timeout, "no answer from keyholed before the deadline; the request may or may not have taken effect")
    /// `protocol_error`: keyholed's answer broke the protocol (PROTOCOL.md sections 2 and 4).
    public static func protocolError(_ reason: String) -> KeyholeClientError {
        KeyholeClientError(.protocolError, "invalid answer from keyholed: \(reason)")
    }
    /// The same as `protocolError(_:)` (its earlier name).
    public static func invalidResponse(_ reason: String) -> KeyholeClientError {
        protocolError(reason)
    }
}
