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
            case tokenMalformed = "token_malformed"
            case tokenAlgNotAllowed = "token_alg_not_allowed"
            case tokenKeyUnknown = "token_key_unknown"
            case tokenSignatureInvalid = "token_signature_invalid"
            case tokenExpired = "token_expired"
            case tokenNotYetValid = "token_not_yet_valid"
            case tokenIssuerUnknown = "token_issuer_unknown"
            case tokenAudienceInvalid = "token_audience_invalid"
            case tokenNonceMismatch = "token_nonce_mismatch"
            case tokenClaimInvalid = "token_claim_invalid"
            case keysUnavailable = "keys_unavailable"
            case sessionNotFound = "session_not_found"
            case userNotFound = "user_not_found"
            case storageUnavailable = "storage_unavailable"
            case dataTooLarge = "data_too_large"
            case upstreamRejected = "upstream_rejected"
            case upstreamUnavailable = "upstream_unavailable"
            case notConfigured = "not_configured"
            case stateInvalid = "state_invalid"
            case appleAuthorizationRefused = "apple_authorization_refused"
            case configInvalid = "config_invalid"
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
        /// Not a compact JWS, or its header or payload is not what a JWT must be.
        public static let tokenMalformed = Code(.tokenMalformed)
        /// The token's `alg` is not one the issuer allows.
        public static let tokenAlgNotAllowed = Code(.tokenAlgNotAllowed)
        /// No key of the issuer's set fits the token's `kid` and `alg`.
        public static let tokenKeyUnknown = Code(.tokenKeyUnknown)
        /// The token's signature does not verify.
        public static let tokenSignatureInvalid = Code(.tokenSignatureInvalid)
        /// The token has expired.
        public static let tokenExpired = Code(.tokenExpired)
        /// The token is not valid yet (`nbf` or `iat` in the future).
        public static let tokenNotYetValid = Code(.tokenNotYetValid)
        /// No configured issuer matches the request or the token's `iss`.
        public static let tokenIssuerUnknown = Code(.tokenIssuerUnknown)
        /// The token's `aud` holds none of the accepted audiences.
        public static let tokenAudienceInvalid = Code(.tokenAudienceInvalid)
        /// The token's `nonce` does not match the request's.
        public static let tokenNonceMismatch = Code(.tokenNonceMismatch)
        /// A claim is missing or of the wrong type.
        public static let tokenClaimInvalid = Code(.tokenClaimInvalid)
        /// The issuer's key set is not available yet; retry after `retry_after_ms`.
        public static let keysUnavailable = Code(.keysUnavailable)
        /// No live session has this token or id: unknown, expired and revoked look alike.
        public static let sessionNotFound = Code(.sessionNotFound)
        /// No user record for this issuer and subject.
        public static let userNotFound = Code(.userNotFound)
        /// A change could not be made durable (disk full, I/O error); reads still work. Retry after
        /// `retry_after_ms`.
        public static let storageUnavailable = Code(.storageUnavailable)
        /// A session's `data` is larger than the configured maximum.
        public static let dataTooLarge = Code(.dataTooLarge)
        /// An upstream service (Apple) refused the request; `apple_error` says how.
        public static let upstreamRejected = Code(.upstreamRejected)
        /// An upstream service (Apple) could not be reached or failed; retry after `retry_after_ms`.
        public static let upstreamUnavailable = Code(.upstreamUnavailable)
        /// The operation needs configuration keyholed does not have (such as `[apple]`).
        public static let notConfigured = Code(.notConfigured)
        /// `apple.callback`: the state is missing, unknown, expired, used, or another browser's.
        public static let stateInvalid = Code(.stateInvalid)
        /// `apple.callback`: Apple answered with an error (the user cancelled) instead of a code.
        public static let appleAuthorizationRefused = Code(.appleAuthorizationRefused)
        /// `admin.reload`: the configuration file does not load; the running configuration stays.
        public static let configInvalid = Code(.configInvalid)
    }

    /// The stable code.
    public let code: Code
    /// A human-readable explanation; never parse it.
    public let message: String
    /// How long the client should wait before retrying, when the server suggests it.
    public let retryAfterMs: Int?
    /// With `upstream_rejected` from Apple: Apple's `error` (`invalid_grant`, `invalid_client`, ...).
    public let appleError: String?

    /// Creates an error; prefer the static factories.
    public init(code: Code, message: String, retryAfterMs: Int? = nil, appleError: String? = nil) {
        self.code = code
        self.message = message
        self.retryAfterMs = retryAfterMs
        self.appleError = appleError
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
    /// The last frame of a connection closed by a graceful shutdown (sent with a null id): every
    /// request on it still unanswered was never read, so a client sends each again on a new
    /// connection, whatever its operation (PROTOCOL.md sections 5 and 8).
    public static func goodbye() -> ProtocolError {
        ProtocolError(
            code: .shuttingDown,
            message: "keyholed is shutting down: requests on this connection still unanswered were not read; send them again on a new connection")
    }
    /// An unexpected failure inside the server.
    public static func `internal`(_ message: String = "internal error") -> ProtocolError {
        ProtocolError(code: .internal, message: message)
    }

    /// No live session (unknown, expired or revoked: the same answer for each).
    public static func sessionNotFound() -> ProtocolError {
        ProtocolError(code: .sessionNotFound, message: "no such session (unknown, expired or revoked)")
    }

    /// No user record for `principal`.
    public static func userNotFound(_ principal: String) -> ProtocolError {
        ProtocolError(code: .userNotFound, message: "no user \(principal)")
    }

    /// A change could not be made durable.
    public static func storageUnavailable(_ message: String, retryAfterMs: Int = 1000) -> ProtocolError {
        ProtocolError(code: .storageUnavailable, message: message, retryAfterMs: retryAfterMs)
    }

    /// `data` of `size` bytes is over `limit`.
    public static func dataTooLarge(size: Int, limit: Int) -> ProtocolError {
        ProtocolError(code: .dataTooLarge, message: "'data' is \(size) bytes as compact JSON; the limit is \(limit)")
    }

    /// Apple refused a request with the OAuth error `appleError`.
    public static func upstreamRejected(_ message: String, appleError: String) -> ProtocolError {
        ProtocolError(code: .upstreamRejected, message: message, appleError: appleError)
    }

    /// Apple could not be reached or failed; worth retrying after `retryAfterMs`.
    public static func upstreamUnavailable(_ message: String, retryAfterMs: Int) -> ProtocolError {
        ProtocolError(code: .upstreamUnavailable, message: message, retryAfterMs: retryAfterMs)
    }

    /// The operation needs configuration that is missing.
    public static func notConfigured(_ message: String) -> ProtocolError {
        ProtocolError(code: .notConfigured, message: message)
    }
}
