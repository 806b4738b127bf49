/// Why keyholed cannot use what systemd handed it.
public struct SystemdError: Error, Sendable, Hashable, CustomStringConvertible {
    private enum Code: Sendable, Hashable {
        case listenSockets
    }

    private let code: Code
    /// What went wrong, for an operator.
    public let message: String

    private init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// The sockets passed by socket activation cannot be used (none named as expected, not a
    /// listening Unix stream socket, LISTEN_FDS malformed).
    public static func listenSockets(_ message: String) -> SystemdError { SystemdError(.listenSockets, message) }

    public var description: String { message }

    public static func == (lhs: SystemdError, rhs: SystemdError) -> Bool { lhs.code == rhs.code }
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }
}
