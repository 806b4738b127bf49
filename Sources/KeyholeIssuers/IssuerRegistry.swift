import KeyholeJOSE
import KeyholeProtocol
import NIOCore
import Synchronization

/// The configured issuers with their keys, and the cache of verified tokens: picks the issuer for a
/// token and verifies it.
///
/// A token goes to the issuer the request names, else to the one whose `iss` it carries.
///
/// Copies share one set of issuers, which `replaceIssuers(_:)` swaps on a reload.
public struct IssuerRegistry: Sendable {
    private let directory: IssuerDirectory
    private let cache: VerifiedTokenCache?
    private let encoder: (@Sendable (Verification) -> ByteBuffer)?

    /// The issuers, and a cache of verified tokens (`nil`: none).
    ///
    /// - Parameter encoder: how the caller answers a verification; when given, each verification
    ///   carries its answer (`encoded`), made once per token and kept in the cache with it.
    public init(
        issuers: [IssuerKeys], cache: VerifiedTokenCache?, encoder: (@Sendable (Verification) -> ByteBuffer)? = nil
    ) {
        directory = IssuerDirectory(issuers)
        self.cache = cache
        self.encoder = encoder
        Self.watchKeys(of: issuers, cache: cache)
        VerificationMetrics.shared.register(issuers)
    }

    /// A new key set drops the cached tokens of keys that left it.
    private static func watchKeys(of issuers: [IssuerKeys], cache: VerifiedTokenCache?) {
        guard let cache else { return }
        for keys in issuers {
            let name = keys.configuration.name
            keys.onKeysChanged { set in cache.removeEntries(of: name, keptKeys: set) }
        }
    }

    /// Issuers with fixed key sets, by issuer name (an issuer without one answers `keys_unavailable`),
    /// and no cache: for tests and tools.
    public init(issuers: [IssuerConfiguration], keySets: [String: JWKSet]) {
        self.init(
            issuers: issuers.map { configuration in
                keySets[configuration.name].map { IssuerKeys(configuration: configuration, keys: $0) }
                    ?? IssuerKeys(configuration: configuration)
            }, cache: nil)
    }

    /// The configured issuers.
    public var issuers: [IssuerKeys] { directory.issuers }

    /// Puts `issuers` in place of the current ones (a reload), for every copy of this registry.
    /// Issuers kept as the same object keep their cached tokens; the others' are never used again
    /// (a cache entry names the object that verified it), and each one left out is retired, which
    /// ends its refresh loop. Requests already past the lookup finish with what they found.
    public func replaceIssuers(_ issuers: [IssuerKeys]) {
        let previous = directory.issuers
        Self.watchKeys(of: issuers.filter { new in !previous.contains { $0 === new } }, cache: cache)
        VerificationMetrics.shared.register(issuers)
        directory.replace(issuers)
        for keys in previous where !issuers.contains(where: { $0 === keys }) {
            keys.retire()
        }
    }

    /// The issuers now, then after each `replaceIssuers(_:)`, until the task is cancelled.
    public func issuerChanges() -> AsyncStream<[IssuerKeys]> { directory.changes() }

    /// The cache of verified tokens, if there is one.
    public var verifiedTokens: VerifiedTokenCache? { cache }

    /// The outcome of a verification: which issuer vouched for the token, and its claims.
    public struct Verification: Sendable {
        /// The issuer's configured name.
        public let issuer: String
        /// The verified token. From a cache hit with `encoded` set, its `claims` are empty (the
        /// answer holds them).
        public var token: VerifiedToken {
            switch source {
            case .verified(let token): token
            case .cached(let entry): entry.token
            }
        }
        /// The token's payload as sent, when it equals `token.claims` (strict JSON, already checked).
        public let payload: [UInt8]?
        /// The answer made by the registry's encoder, if it has one.
        public fileprivate(set) var encoded: ByteBuffer?
        /// Where `token` is: a cache hit keeps its entry rather than a copy of the token, which
        /// would count a reference for each of its strings and arrays (`token.verify` answers a
        /// hit with `encoded` alone).
        private let source: Source

        private enum Source: Sendable {
            // Boxed: inline, the token's space made every verification a large value, and the
            // compiler copied a cache hit's whole (then destroyed the original) on its way into an
            // `Attempt`. A box is one allocation on a token's first verification, which is far
            // costlier anyway (a signature checked).
            indirect case verified(VerifiedToken)
            case cached(VerifiedTokenCache.Entry)
        }

        /// A verification.
        public init(issuer: String, token: VerifiedToken, payload: [UInt8]? = nil, encoded: ByteBuffer? = nil) {
            self.issuer = issuer
            self.source = .verified(token)
            self.payload = payload
            self.encoded = encoded
        }

        /// A verification answered from the cache's `entry`.
        init(issuer: String, cached entry: VerifiedTokenCache.Entry) {
            self.issuer = issuer
            self.source = .cached(entry)
            self.payload = nil
            self.encoded = entry.encoded
        }
    }

    /// What one attempt at verifying found.
    public enum Attempt: Sendable {
        /// The token verified.
        case verified(Verification)
        /// The issuer has no key for the token (unknown `kid`) or no keys at all, and a fetch is
        /// running or allowed: after it (see `verifyAfterFetch`) the token may verify; else answer
        /// `error`. When no fetch can help (a key-set file, the cool-down), `attempt` throws instead.
        case needsKeys(IssuerKeys, error: ProtocolError)
    }

    /// Verifies `token` with the keys in hand, without waiting for a fetch.
    ///
    /// - Throws: `ProtocolError` with the code to answer: the `token_*` codes of the JOSE layer, and
    ///   `token_issuer_unknown` when no issuer fits.
    public func attempt(
        token: String, issuer: String?, audience: String?, nonce: String?, now: Double
    ) throws(ProtocolError) -> Attempt {
        try attempt(token: ByteBuffer(string: token), issuer: issuer, audience: audience, nonce: nonce, now: now)
    }

    /// `attempt` for a token given as its bytes (as they lie in a request's frame): a cached token
    /// is found without a `String` made of it.
    public func attempt(
        token: ByteBuffer, issuer: String?, audience: String?, nonce: String?, now: Double
    ) throws(ProtocolError) -> Attempt {
        var routed: IssuerKeys?
        do {
            let outcome = try attemptUncounted(token: token, issuer: issuer, audience: audience, nonce: nonce, now: now, routed: &routed)
            // `routed` is the issuer that vouched: binding the verification to read its name copied
            // it whole (a reference counted for each of its members), on every cache hit.
            if case .verified = outcome {
                assert(routed != nil, "a verification with no issuer routed to")
                if let routed { VerificationMetrics.shared.countVerified(by: routed) }
            }
            return outcome
        } catch {
            VerificationMetrics.shared.count(issuer: routed?.configuration.name, code: error.code)
            throw error
        }
    }

    /// `attempt`, without the count; `routed` is the issuer the token went to, once known (and so the
    /// one that vouched for it when it verified).
    private func attemptUncounted(
        token bytes: ByteBuffer, issuer: String?, audience: String?, nonce: String?, now: Double, routed: inout IssuerKeys?
    ) throws(ProtocolError) -> Attempt {
        let entries = directory.issuers
        // One too long for a token is never looked up (nor kept): parsing refuses it by its length.
        let cacheable = bytes.readableBytes <= CompactJWS.maximumLength
        if let cache, cacheable {
            if let hit = try cached(bytes, in: cache, entries: entries, issuer: issuer, audience: audience, nonce: nonce, now: now, routed: &routed) {
                return .verified(Verification(issuer: hit.issuer, cached: hit))
            }
            VerificationMetrics.shared.cacheMisses.increment()
        }
        let token = String(buffer: bytes)
        let jws: CompactJWS
        do {
            jws = try CompactJWS.parse(token)
        } catch {
            throw Self.protocolError(error)
        }
        // The payload is parsed once: to route by its iss, and then for the claims checks.
        let claims = Self.claims(jws)
        let keys = try Self.route(entries, issuer: issuer, claims: claims)
        routed = keys
        guard let verifier = keys.verifier() else {
            let error = Self.keysUnavailable(keys)
            guard keys.fetchMayHelp() else { throw error }
            return .needsKeys(keys, error: error)
        }
        do throws(JOSEError) {
            // Signature first, as JWTVerifier does: an unsigned payload's claims are never judged.
            let key = try verifier.signatures.verify(jws)
            guard let claims else { throw JOSEError.malformed("payload is not a JSON object") }
            let verified = try ClaimsValidator.validate(
                claims: claims, policy: verifier.policy, now: now, audience: audience, nonce: nonce)
            let name = keys.configuration.name
            var verification = Verification(
                issuer: name, token: verified, payload: verified.claimsAreVerbatim ? jws.payload : nil)
            verification.encoded = encoder?(verification)
            if let cache, cacheable {
                let evictAt = verified.expiresAt + Double(verifier.policy.leeway)
                // With the answer kept, the claims are not: a cached token stays small, and the
                // payload's many small allocations are freed now, while still in the CPU's caches.
                let kept = verification.encoded == nil ? verified : verified.strippingClaims()
                cache.insert(
                    .init(issuer: name, token: kept, key: key, evictAt: evictAt, encoded: verification.encoded, keysSerial: keys.serial),
                    for: bytes)
            }
            return .verified(verification)
        } catch where error.code == .tokenKeyUnknown && keys.fetchMayHelp() {
            return .needsKeys(keys, error: Self.protocolError(error))
        } catch {
            throw Self.protocolError(error)
        }
    }

    /// Verifies `token`; an unknown key is answered at once, without a fetch.
    public func verify(
        token: String, issuer: String?, audience: String?, nonce: String?, now: Double
    ) throws(ProtocolError) -> Verification {
        switch try attempt(token: token, issuer: issuer, audience: audience, nonce: nonce, now: now) {
        case .verified(let verification): return verification
        case .needsKeys(_, let error): throw error
        }
    }

    /// After an attempt found `.needsKeys(keys, ...)`: joins or starts a fetch of `keys` (single
    /// flight, rate limited) and tries again.
    public func verifyAfterFetch(
        of keys: IssuerKeys, token: String, issuer: String?, audience: String?, nonce: String?,
        now: @Sendable () -> Double
    ) async throws(ProtocolError) -> Verification {
        // Two rounds: a request that joined a fetch it did not cause (the first one at start-up, a
        // refresh) and still lacks its key may then cause an unknown-key fetch, under the cool-down.
        var failure: ProtocolError
        var round = 0
        repeat {
            let outcome = await keys.fetchForUnknownKey()
            switch try attempt(token: token, issuer: issuer, audience: audience, nonce: nonce, now: now()) {
            case .verified(let verification): return verification
            case .needsKeys(_, let error): failure = error
            }
            guard outcome == .succeeded else { break }
            round += 1
        } while round < 2
        // An unknown key after the fetches: counted here, since `attempt` counted no outcome.
        VerificationMetrics.shared.count(issuer: keys.configuration.name, code: failure.code)
        throw failure
    }

    /// A cache hit still vouched for: same issuer as asked, its key still in the set; then the
    /// request's and the clock's checks.
    private func cached(
        _ token: ByteBuffer, in cache: VerifiedTokenCache, entries: [IssuerKeys], issuer: String?, audience: String?,
        nonce: String?, now: Double, routed: inout IssuerKeys?
    ) throws(ProtocolError) -> VerifiedTokenCache.Entry? {
        guard let hit = cache.entry(for: token, now: now), issuer.map({ ExactString.equal($0, hit.issuer) }) ?? true,
            let keys = entries.first(where: { ExactString.equal($0.configuration.name, hit.issuer) }), keys.serial == hit.keysSerial
        else { return nil }
        let check = keys.checkCached(hit, now: now, audience: audience, nonce: nonce)
        if case .stale = check { return nil }
        // A hit is a token answered from the cache, accepted or refused by the request's and the
        // clock's checks: either way, without its signature checked again.
        routed = keys
        VerificationMetrics.shared.cacheHits.increment()
        if case .refused(let error) = check { throw Self.protocolError(error) }
        return hit
    }

    private static func route(_ entries: [IssuerKeys], issuer: String?, claims: [String: JSONValue]?) throws(ProtocolError) -> IssuerKeys {
        if let issuer {
            guard let named = entries.first(where: { ExactString.equal($0.configuration.name, issuer) }) else {
                throw ProtocolError(code: .tokenIssuerUnknown, message: "no issuer named '\(issuer.prefix(64))' is configured")
            }
            return named
        }
        // Read before anything is verified: used only to pick whose keys check the token.
        guard let iss = claims?["iss"]?.stringValue,
            let matching = entries.first(where: { $0.configuration.policy.acceptsIssuer(iss) })
        else {
            throw ProtocolError(code: .tokenIssuerUnknown, message: "the token's iss matches no configured issuer")
        }
        return matching
    }

    /// `keys_unavailable`, with a retry hint: when the next fetch is due, between 1 s and 1 min.
    static func keysUnavailable(_ keys: IssuerKeys) -> ProtocolError {
        let status = keys.status()
        let now = keys.clock.now()
        let wait = status.nextFetchAt.map { $0 - now } ?? 1
        let detail = status.lastError.map { ": the last fetch failed (\($0))" } ?? ""
        return ProtocolError(
            code: .keysUnavailable,
            message: "issuer '\(keys.configuration.name)' has no usable key set yet\(detail)",
            retryAfterMs: Int((min(max(wait, 1), 60) * 1000).rounded()))
    }

    /// The token's payload as a JSON object, or `nil` when it is not one.
    static func claims(_ jws: CompactJWS) -> [String: JSONValue]? {
        guard case .object(let claims)? = try? JSONValue.parse(ByteBuffer(bytes: jws.payload)) else { return nil }
        return claims
    }

    /// The protocol error for a JOSE error; the codes share their names.
    static func protocolError(_ error: JOSEError) -> ProtocolError {
        ProtocolError(code: ProtocolError.Code(rawValue: error.code.rawValue) ?? .internal, message: error.message)
    }
}
