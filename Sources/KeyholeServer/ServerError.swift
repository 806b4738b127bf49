/// Why the server could not start listening.
public struct ServerError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Hashable, Sendable {
        case socketInUse
        case notASocket
        case socketPath
        case bindFailed
        case invalidConfiguration
    }

    private let code: Code
    /// What went wrong, for the operator.
    public let message: String

    /// Equality by code only.
    public static func == (lhs: ServerError, rhs: ServerError) -> Bool { lhs.code == rhs.code }
    /// Hashes the code only.
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    /// The message.
    public var description: String { message }

    /// Another process answers on the socket path.
    public static func socketInUse(_ path: String) -> ServerError {
        ServerError(code: .socketInUse, message: "another process is listening on \(path); is keyholed already running?")
    }
    /// The socket path exists and is not a socket: never delete it.
    public static func notASocket(_ path: String) -> ServerError {
        ServerError(code: .notASocket, message: "\(path) exists and is not a socket; refusing to replace it")
    }
    /// The socket path cannot be used (too long, missing directory, not removable).
    public static func socketPath(_ message: String) -> ServerError {
        ServerError(code: .socketPath, message: message)
    }
    /// A setting the server cannot run with.
    public static func invalidConfiguration(_ message: String) -> ServerError {
        ServerError(code: .invalidConfiguration, message: "invalid server configuration: \(message)")
    }
    /// Binding or listening failed.
    public static func bindFailed(_ path: String, _ reason: String) -> ServerError {
        ServerError(code: .bindFailed, message: "cannot listen on \(path): \(reason)")
    }
}
