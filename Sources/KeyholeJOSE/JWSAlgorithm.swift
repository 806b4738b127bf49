/// The JWS signature algorithms keyholed verifies (RFC 7518, RFC 8037). HMAC and `none` are deliberately
/// absent: an issuer token is never verified with a shared secret, or without a signature.
public enum JWSAlgorithm: String, Sendable, Hashable, CaseIterable {
    case rs256 = "RS256"
    case rs384 = "RS384"
    case rs512 = "RS512"
    case ps256 = "PS256"
    case ps384 = "PS384"
    case ps512 = "PS512"
    case es256 = "ES256"
    case es384 = "ES384"
    case edDSA = "EdDSA"
}
