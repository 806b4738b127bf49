import KeyholeApple
import KeyholeIssuers
import KeyholeJOSE
import KeyholeProtocol
import KeyholeStore
import Logging

extension AppleOperations {
    /// One `apple.sign_in`: verify, exchange the code, upsert the user, create the session.
    struct SignIn: Sendable {
        let configuration: Configuration
        let registry: IssuerRegistry
        let store: any AppleStoring
        let sessions: StoreOperations.Configuration
        let now: @Sendable () -> Double
        let logger: Logger

        /// What the app passes from Apple's first authorization (web flows get it once).
        struct GivenUser: Sendable {
            var email: String?
            var name: [String: JSONValue] = [:]
            /// The name is kept only by a user with none stored (the web flow's `user` field, which
            /// the browser could forge); otherwise merged over the stored one.
            var nameOnlyIfNone = false
        }

        func run(_ request: Request) async throws(ProtocolError) -> [String: JSONValue] {
            var arguments = Arguments(request)
            let identityToken = try arguments.string("identity_token", required: true, maxBytes: CompactJWS.maximumLength)!
            let code = try arguments.string("authorization_code", maxBytes: 4096)
            let clientID = try arguments.string("client_id", maxBytes: 255)
            let nonce = try arguments.string("nonce", maxBytes: 1024)
            let given = try Self.givenUser(arguments.value("user"))
            let (ttl, idle, data) = try sessionArguments(arguments.value("session"))
            try arguments.finish()
            if let clientID, !configuration.clientIDs.containsExactly(clientID) {
                throw .badRequest("client_id '\(clientID)' is not among [apple] client_ids")
            }

            let verified = try await verify(identityToken, audience: clientID, nonce: nonce).token
            // A token that carries a nonce was asked for with one: signing in with it and no nonce
            // would let a captured token open sessions until it expires.
            if nonce == nil, verified.nonce != nil {
                throw ProtocolError(code: .tokenNonceMismatch, message: "the token carries a nonce: pass the raw nonce the sign-in was started with")
            }
            // The client the token was issued to: the code was issued to the same one, and must be
            // exchanged under it (never simply the first configured client).
            let audiences = verified.audiences.filter(configuration.clientIDs.containsExactly)
            let client: String
            if let clientID {
                client = clientID
            } else if audiences.count == 1 {
                client = audiences[0]
            } else if audiences.isEmpty {
                throw ProtocolError(code: .tokenAudienceInvalid, message: "the token's aud names none of [apple] client_ids")
            } else {
                throw .badRequest("the token is for several of [apple] client_ids: give client_id")
            }
            return try await complete(
                verified, client: client, redirectURI: configuration.redirectURIs[client], code: code, given: given, ttl: ttl, idle: idle,
                data: data)
        }

        /// The rest of a sign-in once the token is verified and its client known (`apple.sign_in`, and
        /// `apple.callback` with what its pending authorization kept): exchange the code under `client`
        /// and `redirectURI`, upsert the user, create the session; the result.
        func complete(
            _ verified: VerifiedToken, client: String, redirectURI: String?, code: String?, given: GivenUser, ttl: Int64, idle: Int64,
            data: [UInt8]?
        ) async throws(ProtocolError) -> [String: JSONValue] {
            // The same bounds as a `sub` argument of session.create: a user record keeps at most
            // 255 bytes of subject, and the token is the caller's input as much as an argument is.
            // (A longer transfer_sub is read as none: VerifiedToken.)
            guard !verified.subject.isEmpty, verified.subject.utf8.count <= Principal.maximumFieldBytes else {
                throw ProtocolError(
                    code: .tokenClaimInvalid,
                    message: "the token's sub must be 1 to \(Principal.maximumFieldBytes) bytes long, as a user's subject is")
            }
            let principal = Principal(issuer: configuration.issuer, sub: verified.subject)

            var sealed: [UInt8]?
            if let code {
                guard let exchange = configuration.exchange else {
                    throw .notConfigured("exchanging an authorization code needs [apple] team_id, key_id, private_key_file and store_key_file")
                }
                sealed = try await self.exchange(code, client: client, redirectURI: redirectURI, principal: principal, with: exchange)
            }

            let time = Int64(now().rounded(.down))
            if let transferSub = verified.transferSub, !ExactString.equal(transferSub, verified.subject) {
                // The first sign-in after a team transfer: the record kept under the transfer
                // identifier (imported from the sending team) becomes this user's.
                _ = try await Transfer(configuration: configuration, store: store, now: now, logger: logger)
                    .move(from: transferSub, to: verified.subject, now: time)
            }
            let grant = sealed.map { AppleGrant(sealedToken: $0, clientID: client, checkedAt: time) }
            // The record and the session in one change: a crash or a failure keeps both or neither
            // (never a stored grant without the session it came with).
            let signedIn = try await StoreCommit.stored { () async throws(StoreError) in
                try await store.signIn(principal, now: time, ttl: ttl, idle: UInt32(idle), data: data) { user in
                    Self.apply(verified, given: given, to: &user)
                    grant?.store(in: &user)
                }
            }
            SessionMetrics.created.increment()
            return [
                "created": .bool(signedIn.created),
                "user": .object(signedIn.user.publicJSON),
                "session": .object([
                    "session": .string(signedIn.token),
                    "id": .string(signedIn.session.id.description),
                    "expires_at": .int(signedIn.session.expiresAt),
                ]),
            ]
        }

        /// Verifies an Apple identity token, waiting for a key-set fetch when its key is new.
        func verify(_ token: String, audience: String?, nonce: String?) async throws(ProtocolError) -> IssuerRegistry.Verification {
            let issuer = configuration.issuer
            switch try registry.attempt(token: token, issuer: issuer, audience: audience, nonce: nonce, now: now()) {
            case .verified(let verification):
                return verification
            case .needsKeys(let keys, _):
                return try await registry.verifyAfterFetch(of: keys, token: token, issuer: issuer, audience: audience, nonce: nonce, now: now)
            }
        }

        /// Exchanges `code` under `client`, checks the id_token Apple returns is the same user's, and
        /// returns the refresh token sealed (nil if Apple gave none).
        func exchange(
            _ code: String, client: String, redirectURI: String?, principal: Principal, with exchange: Exchange
        ) async throws(ProtocolError) -> [UInt8]? {
            let tokens: AppleClient.TokenResponse
            do {
                tokens = try await exchange.client.exchangeCode(code, clientID: client, redirectURI: redirectURI)
            } catch {
                if error.isRejected && !error.isInvalidGrant {
                    // invalid_client, invalid_request, unauthorized_client: keyholed's own
                    // configuration is wrong, and every sign-in with a code will fail until it is fixed.
                    logger.error("apple.exchange_refused", metadata: [
                        "apple_error": "\(error.appleError ?? "")", "client_id": "\(client)", "error": "\(error.message)",
                    ])
                } else if !error.isRejected {
                    logger.warning("apple.unavailable", metadata: ["client_id": "\(client)", "error": "\(error.message)"])
                }
                throw error.protocolError
            }
            // From here the code is spent: a retry with it can only get invalid_grant.
            let returned: VerifiedToken
            do {
                returned = try await verify(tokens.idToken!, audience: client, nonce: nil).token
            } catch {
                await discard(tokens.refreshToken, client: client, with: exchange)
                throw .upstreamUnavailable(
                    "the id_token Apple returned for the code does not verify (\(error.code): \(error.message)); the code is spent: start a new authorization",
                    retryAfterMs: 1000)
            }
            guard ExactString.equal(returned.subject, principal.sub) else {
                await discard(tokens.refreshToken, client: client, with: exchange)
                throw .badRequest("the authorization code is another user's than the identity token's")
            }
            guard let refreshToken = tokens.refreshToken else { return nil }
            guard let sealed = AppleGrant.seal(refreshToken, for: principal, with: exchange.sealingKey) else {
                throw .internal("could not seal the refresh token")
            }
            return sealed
        }

        /// Revokes a refresh token that will not be stored (best effort: Apple would otherwise keep a
        /// grant nobody holds).
        func discard(_ refreshToken: String?, client: String, with exchange: Exchange) async {
            guard let refreshToken else { return }
            do {
                try await exchange.client.revoke(refreshToken, kind: .refreshToken, clientID: client)
            } catch {
                logger.warning("apple.discarded_token_not_revoked", metadata: ["client_id": "\(client)", "error": "\(error.message)"])
            }
        }

        /// Updates `user` from a verified token and what the app passed: the token's email and flags
        /// when present; the given name and email only where they add something. Nothing is erased.
        static func apply(_ token: VerifiedToken, given: GivenUser, to user: inout User) {
            if let email = token.email {
                user.fields["email"] = .string(email)
            } else if let email = given.email, user.fields["email"] == nil {
                // Only the app vouches for it: flags left from an earlier token must not cover it.
                user.fields["email"] = .string(email)
                user.fields["email_verified"] = .bool(false)
                user.fields["is_private_email"] = nil
            }
            if let verified = token.emailVerified { user.fields["email_verified"] = .bool(verified) }
            if let isPrivate = token.isPrivateEmail { user.fields["is_private_email"] = .bool(isPrivate) }
            if !given.name.isEmpty, !(given.nameOnlyIfNone && user.fields["name"] != nil) {
                var name: [String: JSONValue] = [:]
                if case .object(let stored)? = user.fields["name"] { name = stored }
                name.merge(given.name) { $1 }
                user.fields["name"] = .object(name)
            }
        }

        /// `user`: `{email?, name?: {given?, family?}}`.
        static func givenUser(_ value: JSONValue?) throws(ProtocolError) -> GivenUser {
            var given = GivenUser()
            switch value {
            case nil, .null?:
                return given
            case .object(let members)?:
                for (key, member) in members {
                    switch key {
                    case "email":
                        if case .string(let email)? = try StoreOperations.optionalString(member, name: "user.email", maxBytes: 320) {
                            given.email = email
                        }
                    case "name":
                        if case .object(let name)? = try StoreOperations.nameChange(member) { given.name = name }
                    default:
                        throw .badRequest("'user' has an unknown member '\(key)'")
                    }
                }
                return given
            default:
                throw .badRequest("'user' must be an object {email?, name?}")
            }
        }

        /// `session`: `{ttl_s?, idle_s?, data?}`, with session.create's limits and defaults.
        func sessionArguments(_ value: JSONValue?) throws(ProtocolError) -> (ttl: Int64, idle: Int64, data: [UInt8]?) {
            switch value {
            case nil, .null?, .object?:
                var arguments = Arguments(Request(id: nil, op: "session", args: value?.objectValue ?? [:]))
                let parameters = try StoreOperations.sessionParameters(&arguments, sessions)
                try arguments.finish()
                return parameters
            default:
                throw .badRequest("'session' must be an object {ttl_s?, idle_s?, data?}")
            }
        }
    }
}
