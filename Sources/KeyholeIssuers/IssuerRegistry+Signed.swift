import KeyholeJOSE
import KeyholeProtocol

extension IssuerRegistry {
    /// A JWT whose signature verified with an issuer's keys; its claims are left to the caller.
    public struct SignedPayload: Sendable {
        /// The issuer whose key signed it: its policy says which `iss` and audiences are its own.
        public let keys: IssuerKeys
        /// The payload.
        public let claims: [String: JSONValue]
    }

    /// Verifies the signature of `token` with the keys of the issuer named `issuer`, fetching them
    /// once when its key is unknown (as `verifyAfterFetch`), for JWTs that are not identity tokens
    /// and so fail the identity checks (Apple's server-to-server notifications carry no `sub`). The
    /// caller checks the claims, `iss` included.
    ///
    /// - Throws: `token_issuer_unknown` when no such issuer is configured; the `token_*` codes of the
    ///   JOSE layer for the signature; `keys_unavailable`.
    public func verifySignature(of token: String, issuer: String) async throws(ProtocolError) -> SignedPayload {
        guard let keys = issuers.first(where: { ExactString.equal($0.configuration.name, issuer) }) else {
            throw ProtocolError(code: .tokenIssuerUnknown, message: "no issuer named '\(issuer.prefix(64))' is configured")
        }
        let jws: CompactJWS
        do {
            jws = try CompactJWS.parse(token)
        } catch {
            throw Self.protocolError(error)
        }
        // As verifyAfterFetch: two fetches at most (one joined, one caused), each followed by a try.
        var fetches = 0
        var lastFetch: IssuerKeys.FetchOutcome?
        while true {
            let failure: ProtocolError
            if let verifier = keys.verifier() {
                do throws(JOSEError) {
                    _ = try verifier.signatures.verify(jws)
                    guard let claims = Self.claims(jws) else { throw JOSEError.malformed("payload is not a JSON object") }
                    return SignedPayload(keys: keys, claims: claims)
                } catch where error.code == .tokenKeyUnknown && keys.fetchMayHelp() {
                    failure = Self.protocolError(error)
                } catch {
                    throw Self.protocolError(error)
                }
            } else {
                failure = Self.keysUnavailable(keys)
                guard keys.fetchMayHelp() else { throw failure }
            }
            guard fetches < 2, lastFetch == nil || lastFetch == .succeeded else { throw failure }
            lastFetch = await keys.fetchForUnknownKey()
            fetches += 1
        }
    }
}
