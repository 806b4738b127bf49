/// Why a token or a key was refused: a stable code (the protocol's `token_*` codes) and a message.
///
/// Two errors are equal when their codes are.
public struct JOSEError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The stable part of the error. Token codes are the protocol's error codes (PROTOCOL.md).
    public struct Code: Sendable, Hashable, CustomStringConvertible {
        private enum Base: String, Sendable {
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
            /// A JWK that cannot be used (not a protocol code: keys come from issuers, not clients).
            case keyInvalid = "key_invalid"
        }

        private let base: Base
        private init(_ base: Base) { self.base = base }

        /// The code as a string, such as `token_expired`.
        public var rawValue: String { base.rawValue }
        /// The code as a string.
        public var description: String { base.rawValue }

        /// Not a compact JWS, or its header or payload is not what a JWT must be.
        public static let tokenMalformed = Code(.tokenMalformed)
        /// The header's `alg` is not one the issuer allows.
        public static let tokenAlgNotAllowed = Code(.tokenAlgNotAllowed)
        /// No key of the issuer's set fits the token's `kid` and `alg`.
        public static let tokenKeyUnknown = Code(.tokenKeyUnknown)
        /// The signature does not verify.
        public static let tokenSignatureInvalid = Code(.tokenSignatureInvalid)
        /// `exp` has passed (beyond the leeway).
        public static let tokenExpired = Code(.tokenExpired)
        /// `nbf` or `iat` is in the future (beyond the leeway).
        public static let tokenNotYetValid = Code(.tokenNotYetValid)
        /// `iss` is not the issuer's.
        public static let tokenIssuerUnknown = Code(.tokenIssuerUnknown)
        /// `aud` holds none of the accepted audiences.
        public static let tokenAudienceInvalid = Code(.tokenAudienceInvalid)
        /// `nonce` does not match the request's.
        public static let tokenNonceMismatch = Code(.tokenNonceMismatch)
        /// A claim is missing or of the wrong type.
        public static let tokenClaimInvalid = Code(.tokenClaimInvalid)
        /// A JWK that cannot be used.
        public static let keyInvalid = Code(.keyInvalid)
    }

    /// The stable code.
    public let code: Code
    /// For people; never contains the token or key material.
    public let message: String

    /// An error; prefer the static factories.
    public init(_ code: Code, _ message: String) {
        self.code = code
        self.message = message
    }

    /// Equality by code only.
    public static func == (lhs: JOSEError, rhs: JOSEError) -> Bool { lhs.code == rhs.code }
    /// Hashes the code only.
    public func hash(into hasher: inout Hasher) { hasher.combine(code) }
    /// `code: message`.
    public var description: String { "\(code): \(message)" }

    /// Not a well-formed token.
    public static func malformed(_ message: String) -> JOSEError { JOSEError(.tokenMalformed, message) }
    /// A JWK that cannot be used.
    public static func keyInvalid(_ message: String) -> JOSEError { JOSEError(.keyInvalid, message) }
}
