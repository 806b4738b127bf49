import KeyholeJOSE
import KeyholeProtocol
import NIOCore

/// The configured issuers and their current key sets: picks the issuer for a token and verifies it.
///
/// A token goes to the issuer the request names, else to the one whose `iss` it carries.
public struct IssuerRegistry: Sendable {
    /// One issuer and, once its keys are in, its verifier.
    struct Entry: Sendable {
        let configuration: IssuerConfiguration
        let verifier: JWTVerifier?
    }

    private let entries: [Entry]

    /// Issuers with the key sets loaded so far, by issuer name; an issuer without one answers
    /// `keys_unavailable`.
    public init(issuers: [IssuerConfiguration], keySets: [String: JWKSet]) {
        entries = issuers.map { configuration in
            Entry(
                configuration: configuration,
                verifier: keySets[configuration.name].map {
                    JWTVerifier(keys: $0, algorithms: configuration.algorithms, policy: configuration.policy)
                })
        }
    }

    /// The configured issuers.
    public var issuers: [IssuerConfiguration] { entries.map(\.configuration) }

    /// The outcome of a verification: which issuer vouched for the token, and its claims.
    public struct Verification: Sendable {
        /// The issuer's configured name.
        public let issuer: String
        /// The verified token.
        public let token: VerifiedToken
    }

    /// Verifies `token` for the issuer named `issuer`, or the one whose `iss` the token carries.
    ///
    /// - Throws: `IssuerError` with the protocol code to answer: the `token_*` codes of the JOSE layer,
    ///   `token_issuer_unknown` when no issuer fits, `keys_unavailable` when its keys are not loaded.
    public func verify(
        token: String, issuer: String?, audience: String?, nonce: String?, now: Double
    ) throws(ProtocolError) -> Verification {
        let jws: CompactJWS
        do {
            jws = try CompactJWS.parse(token)
        } catch {
            throw Self.protocolError(error)
        }
        // The payload is parsed once: to route by its iss, and then for the claims checks.
        let claims = Self.claims(jws)
        let entry: Entry
        if let issuer {
            guard let named = entries.first(where: { $0.configuration.name == issuer }) else {
                throw ProtocolError(code: .tokenIssuerUnknown, message: "no issuer named '\(issuer.prefix(64))' is configured")
            }
            entry = named
        } else {
            // Read before anything is verified: used only to pick whose keys check the token.
            guard let iss = claims?["iss"]?.stringValue,
                let matching = entries.first(where: { $0.configuration.policy.acceptsIssuer(iss) })
            else {
                throw ProtocolError(code: .tokenIssuerUnknown, message: "the token's iss matches no configured issuer")
            }
            entry = matching
        }
        guard let verifier = entry.verifier else {
            throw ProtocolError(
                code: .keysUnavailable, message: "the key set of issuer '\(entry.configuration.name)' is not loaded yet",
                retryAfterMs: 1000)
        }
        do throws(JOSEError) {
            // Signature first, as JWTVerifier does: an unsigned payload's claims are never judged.
            _ = try verifier.signatures.verify(jws)
            guard let claims else { throw JOSEError.malformed("payload is not a JSON object") }
            let verified = try ClaimsValidator.validate(
                claims: claims, policy: verifier.policy, now: now, audience: audience, nonce: nonce)
            return Verification(issuer: entry.configuration.name, token: verified)
        } catch {
            throw Self.protocolError(error)
        }
    }

    /// The token's payload as a JSON object, or `nil` when it is not one.
    private static func claims(_ jws: CompactJWS) -> [String: JSONValue]? {
        guard case .object(let claims)? = try? JSONValue.parse(ByteBuffer(bytes: jws.payload)) else { return nil }
        return claims
    }

    /// The protocol error for a JOSE error; the codes share their names.
    static func protocolError(_ error: JOSEError) -> ProtocolError {
        ProtocolError(code: ProtocolError.Code(rawValue: error.code.rawValue) ?? .internal, message: error.message)
    }
}
