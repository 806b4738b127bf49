/// An error of the Keyhole protocol: a stable code from one closed list, and a message for people.
///
/// Two errors are equal when their codes are: messages may change between releases.
public struct ProtocolError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The stable, machine-readable part of an error. The full list is in Protocol/PROTOCOL.md.
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        fileprivate enum Base: String, CaseIterable {
            case badFrame = "bad_frame"
            case frameTooLarge = "frame_too_large"
            case badRequest = "bad_request"
            case unknownOp = "unknown_op"
            case unsupportedVersion = "unsupported_version"
            case permissionDenied = "permission_denied"
            case overloaded = "overloaded"
            case shuttingDown = "shutting_down"
            case `internal` = "internal"
        }

        fileprivate let base: Base

        /// The code as it appears on the wire, such as `bad_request`.
        public var rawValue: String { base.rawValue }
        /// The code as it appears on the wire.
        public var description: String { base.rawValue }

        /// The code for a wire string; `nil` for a code this version does not know.
        public init?(rawValue: String) {
            guard let base = Base(rawValue: rawValue) else { return nil }
            self.base = base
        }

        fileprivate init(_ base: Base) { self.base = base }

        /// Every code, in the order of the protocol's list.
        public static var allCases: [Code] { Base.allCases.map(Code.init) }

        /// A frame length of 0.
        public static let badFrame = Code(.badFrame)
        /// A frame length above the server's maximum.
        public static let frameTooLarge = Code(.frameTooLarge)
        /// A frame that is not a valid request, or invalid arguments.
        public static let badRequest = Code(.badRequest)
        /// An operation the server does not offer.
        public static let unknownOp = Code(.unknownOp)
        /// A protocol version other than 1.
        public static let unsupportedVersion = Code(.unsupportedVersion)
        /// The peer may not perform this operation.
        public static let permissionDenied = Code(.permissionDenied)
        /// The server is at a limit; retry later.
        public static let overloaded = Code(.overloaded)
        /// The server is stopping.
        public static let shuttingDown = Code(.shuttingDown)
        /// An unexpected failure inside the server.
        public static let `internal` = Code(.internal)
    }

    /// The stable code.
    public let code: Code
    /// A human-readable explanation; never parse it.
    public let message: String
    /// How long the client should wait before retrying, when the server suggests it.
    public let retryAfterMs: Int?

    /// Creates an error; prefer the static factories.
    public init(code: Code, message: String, retryAfterMs: Int? = nil) {
        self.code = code
        self.message = message
        self.retryAfterMs = retryAfterMs
    }

    /// Equality by code only.
    public static func == (lhs: ProtocolError, rhs: ProtocolError) -> Bool { lhs.code == rhs.code }
    /// Hashes the code only, consistent with `==`.
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }

    /// `code: message`.
    public var description: String { "\(code): \(message)" }

    /// A frame length of 0.
    public static func badFrame(_ message: String = "frame length is 0") -> ProtocolError {
        ProtocolError(code: .badFrame, message: message)
    }
    /// A frame length above the maximum.
    public static func frameTooLarge(length: UInt32, maximum: Int) -> ProtocolError {
        ProtocolError(code: .frameTooLarge, message: "frame length \(length) exceeds the maximum of \(maximum) bytes")
    }
    /// A malformed request or invalid arguments.
    public static func badRequest(_ message: String) -> ProtocolError {
        ProtocolError(code: .badRequest, message: message)
    }
    /// An operation the server does not offer.
    public static func unknownOp(_ op: String) -> ProtocolError {
        ProtocolError(code: .unknownOp, message: "unknown operation '\(op.prefix(64))'")
    }
    /// A protocol version other than 1.
    public static func unsupportedVersion() -> ProtocolError {
        ProtocolError(code: .unsupportedVersion, message: "this server speaks protocol version 1 only")
    }
    /// The peer may not perform this operation.
    public static func permissionDenied(_ message: String) -> ProtocolError {
        ProtocolError(code: .permissionDenied, message: message)
    }
    /// The server is at a limit.
    public static func overloaded(_ message: String, retryAfterMs: Int? = 100) -> ProtocolError {
        ProtocolError(code: .overloaded, message: message, retryAfterMs: retryAfterMs)
    }
    /// The server is stopping.
    public static func shuttingDown() -> ProtocolError {
        ProtocolError(code: .shuttingDown, message: "keyholed is shutting down", retryAfterMs: 100)
    }
    /// An unexpected failure inside the server.
    public static func `internal`(_ message: String = "internal error") -> ProtocolError {
        ProtocolError(code: .internal, message: message)
    }
}
