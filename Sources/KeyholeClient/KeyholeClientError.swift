import KeyholeProtocol

/// A failure to talk to keyholed at all (as opposed to an error response, which is a `ProtocolError`).
public struct KeyholeClientError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case cannotConnect
        case connectionClosed
        case invalidResponse
        case timeout
    }

    private let code: Code
    /// What went wrong.
    public let message: String
    /// The error response that ended the connection, when the server sent one (such as `overloaded`).
    public let reason: ProtocolError?

    private init(code: Code, message: String, reason: ProtocolError? = nil) {
        self.code = code
        self.message = message
        self.reason = reason
    }

    /// Equality by code only.
    public static func == (lhs: KeyholeClientError, rhs: KeyholeClientError) -> Bool { lhs.code == rhs.code }
    /// Hashes the code only.
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }
    /// The message.
    public var description: String { message }

    /// Nothing accepted the connection (no socket, nobody listening, no permission).
    public static func cannotConnect(_ path: String, _ reason: String) -> KeyholeClientError {
        KeyholeClientError(code: .cannotConnect, message: "cannot connect to \(path): \(reason)")
    }
    /// The connection closed before the response arrived; the request may or may not have taken effect.
    public static let connectionClosed = KeyholeClientError(
        code: .connectionClosed, message: "connection to keyholed closed before a response arrived")
    /// No response within the client's request timeout; the request may or may not have taken effect.
    public static let timeout = KeyholeClientError(code: .timeout, message: "no response from keyholed in time")
    /// The server ended the connection with an error response that answers no single request.
    public static func connectionClosed(because reason: ProtocolError) -> KeyholeClientError {
        KeyholeClientError(code: .connectionClosed, message: "keyholed closed the connection: \(reason)", reason: reason)
    }
    /// The server sent something that is not a protocol v1 response.
    public static func invalidResponse(_ reason: String) -> KeyholeClientError {
        KeyholeClientError(code: .invalidResponse, message: "invalid response from keyholed: \(reason)")
    }
}
