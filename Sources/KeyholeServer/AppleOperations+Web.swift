import KeyholeApple
import KeyholeJOSE
import KeyholeProtocol
import Logging

extension AppleOperations {
    /// One `apple.authorize`: the URL at Apple and the binding cookie, a pending authorization kept.
    struct WebAuthorization {
        let configuration: Configuration
        let flow: AppleWebFlow
        let now: @Sendable () -> Double

        /// The scopes Apple knows, as `scope` may name them.
        static let scopes = ["name email", "email name", "name", "email", ""]

        func run(_ request: Request, peer: UInt32?) async throws(ProtocolError) -> [String: JSONValue] {
            var arguments = Arguments(request)
            let clientArgument = try arguments.string("client_id", maxBytes: 255)
            let redirectArgument = try arguments.string("redirect_uri", maxBytes: 2048)
            // An empty scope is one of the choices (no name, no email): not the 1-byte minimum of
            // other strings.
            let scope: String
            switch arguments.value("scope") {
            case nil, .null?: scope = "name email"
            case .string(let text)?: scope = text
            default: throw .badRequest("'scope' must be a string")
            }
            let returnTo = try arguments.string("return_to", maxBytes: 4 * AppleWebReturnTo.maximumBytes) ?? "/"
            try arguments.finish()

            // Apple's form always carries a code, and the callback exchanges it: without the means
            // to, no authorization could complete, and the user would learn it after consenting.
            guard configuration.exchange != nil else {
                throw .notConfigured("the web flow exchanges Apple's code: it needs [apple] team_id, key_id, private_key_file and store_key_file")
            }
            let client = try self.client(clientArgument)
            guard let redirectURI = configuration.redirectURIs[client] else {
                throw .notConfigured("'\(client)' has no [apple] redirect_uris entry: the web flow needs the return URL registered for it at Apple")
            }
            if let redirectArgument, !ExactString.equal(redirectArgument, redirectURI) {
                throw .badRequest("redirect_uri must be '\(client)''s [apple] redirect_uris entry: Apple accepts only the return URLs registered for it")
            }
            guard Self.scopes.contains(where: { ExactString.equal($0, scope) }) else {
                throw .badRequest("scope must be \"name email\", \"name\", \"email\" or \"\"")
            }
            if let refusal = AppleWebReturnTo(origins: configuration.web.returnOrigins).refusal(returnTo) {
                throw .badRequest(refusal)
            }
            let web = configuration.web
            // A peer of unknown credentials shares one bucket with every other such peer.
            let started = try await flow.start(
                clientID: client, redirectURI: redirectURI, returnTo: returnTo, peer: peer ?? UInt32.max,
                now: Int64(now().rounded(.down)), lifetime: web.lifetime)
            var apple = AppleClient.Configuration()
            apple.endpoint = web.endpoint
            let url = apple.authorizationURL(clientID: client, redirectURI: redirectURI, scope: scope, state: started.state, nonce: started.nonce)
            // SameSite=None: Apple's answer is a cross-site POST, which would carry no Lax cookie.
            let setCookie = "\(web.cookieName)=\(started.binding); Max-Age=\(web.lifetime); Path=/; Secure; HttpOnly; SameSite=None"
            return [
                "url": .string(url),
                "state": .string(started.state),
                "expires_at": .int(started.expiresAt),
                "cookie": .object([
                    "name": .string(web.cookieName), "value": .string(started.binding), "max_age": .int(web.lifetime),
                    "set_cookie": .string(setCookie),
                ]),
            ]
        }

        /// The Services ID: the argument (one of `client_ids`), else `web_client_id`, else the one
        /// client id with a redirect URI.
        private func client(_ argument: String?) throws(ProtocolError) -> String {
            if let argument {
                guard configuration.clientIDs.containsExactly(argument) else {
                    throw .badRequest("client_id '\(argument)' is not among [apple] client_ids")
                }
                return argument
            }
            if let configured = configuration.web.clientID { return configured }
            let web = configuration.redirectURIs.keys.filter(configuration.clientIDs.containsExactly)
            guard web.count == 1, let only = web.first else {
                if web.isEmpty {
                    throw .notConfigured("the web flow needs a Services ID with its return URL under [apple] redirect_uris")
                }
                throw .badRequest("several of [apple] client_ids have a redirect URI: give client_id, or set [apple] web_client_id")
            }
            return only
        }
    }

    /// One `apple.callback`: Apple's form_post checked against its pending authorization, then the
    /// sign-in `apple.sign_in` does.
    struct WebCallback {
        let signIn: SignIn
        let flow: AppleWebFlow

        /// The largest form field taken (an identity token is at most 16 KiB).
        static let maximumFieldBytes = CompactJWS.maximumLength
        /// The largest `user` field read; a longer one is ignored.
        static let maximumUserBytes = 4096

        func run(_ request: Request) async throws(ProtocolError) -> [String: JSONValue] {
            var arguments = Arguments(request)
            guard case .object(let members)? = arguments.value("form") else {
                throw .badRequest("'form' must be an object: the fields Apple POSTed to the redirect URI")
            }
            // A browser that sent no binding cookie (blocked, expired, another browser) is not a
            // malformed request: its callback uses the state up and is state_invalid.
            let cookie: String
            switch arguments.value("cookie") {
            case nil, .null?: cookie = ""
            case .string(let text)? where text.utf8.count <= 256: cookie = text
            case .string?: throw .badRequest("'cookie' must be at most 256 bytes long")
            default: throw .badRequest("'cookie' must be a string")
            }
            let (ttl, idle, data) = try signIn.sessionArguments(arguments.value("session"))
            try arguments.finish()
            let form = try Self.fields(members)

            // What the form must hold is checked before the state is looked at: a malformed request
            // does not use it up.
            if form["error"] == nil {
                guard form["id_token"] != nil else { throw .badRequest("the form has no id_token") }
                guard form["code"] != nil else { throw .badRequest("the form has no code") }
            }
            guard let state = form["state"] else {
                throw ProtocolError(code: .stateInvalid, message: "the form has no state: start the sign-in again")
            }
            let record: AppleWebPending.Record
            switch try await flow.take(state: state, binding: cookie, now: Int64(signIn.now().rounded(.down))) {
            case .success(let taken): record = taken
            case .failure(.notThisBrowser) where cookie.isEmpty:
                throw ProtocolError(
                    code: .stateInvalid,
                    message: "the callback came without the binding cookie (the browser did not send it: blocked, expired, or another browser): start the sign-in again")
            case .failure(let refusal): throw Self.stateInvalid(refusal)
            }
            if let error = form["error"] {
                // Apple's error text, kept to what a log line and a message may hold.
                let shown = String(decoding: error.utf8.prefix(64).filter { $0 > 0x20 && $0 < 0x7F }, as: UTF8.self)
                throw ProtocolError(code: .appleAuthorizationRefused, message: "Apple answered '\(shown)' instead of a code: nothing was stored")
            }
            guard let idToken = form["id_token"] else { throw .badRequest("the form has no id_token") }
            guard let code = form["code"] else { throw .badRequest("the form has no code") }

            let verified = try await signIn.verify(idToken, audience: record.clientID, nonce: nil).token
            // The nonce keyholed sent to Apple comes back as the token's claim: a token minted for
            // another authorization (a captured one, replayed) carries another.
            guard let nonce = verified.nonce, let digest = SHA256.digest(utf8: nonce),
                AppleWebPending.equalInConstantTime(digest, record.nonce)
            else {
                throw ProtocolError(code: .tokenNonceMismatch, message: "the identity token's nonce is not the one this authorization sent to Apple")
            }
            let given = Self.givenUser(form["user"], logger: signIn.logger)
            var result = try await signIn.complete(
                verified, client: record.clientID, redirectURI: record.redirectURI, code: code, given: given, ttl: ttl, idle: idle, data: data)
            result["return_to"] = .string(record.returnTo)
            return result
        }

        /// The form's string fields keyholed reads, by their exact names; other fields are ignored.
        static func fields(_ members: [String: JSONValue]) throws(ProtocolError) -> [String: String] {
            var fields: [String: String] = [:]
            for (name, value) in members {
                guard let known = ["state", "code", "id_token", "user", "error"].first(where: { ExactString.equal($0, name) }) else {
                    continue
                }
                guard case .string(let text) = value else { throw .badRequest("form.\(known) must be a string") }
                guard text.utf8.count <= maximumFieldBytes else {
                    throw .badRequest("form.\(known) is longer than \(maximumFieldBytes) bytes")
                }
                fields[known] = text
            }
            return fields
        }

        static func stateInvalid(_ refusal: AppleWebPending.Refusal) -> ProtocolError {
            let why =
                switch refusal {
                case .unknown: "no sign-in is pending under this state (unknown, already used, or forgotten by a restart)"
                case .expired: "the sign-in was started more than 10 minutes ago"
                case .notThisBrowser: "the cookie is not the one given to the browser that started this sign-in"
                }
            return ProtocolError(code: .stateInvalid, message: "\(why): start the sign-in again")
        }

        /// Apple's `user` field, given on the first authorization only: `{"name": {"firstName",
        /// "lastName"}, "email"}` as JSON text. Only the name is taken, and only for a user with none
        /// stored: the browser could send anything (the email comes from the token). Anything else
        /// is ignored with a warning that never quotes it: a sign-in does not fail over it.
        static func givenUser(_ text: String?, logger: Logger) -> SignIn.GivenUser {
            var given = SignIn.GivenUser()
            given.nameOnlyIfNone = true
            guard let text else { return given }
            func ignored(_ reason: String) -> SignIn.GivenUser {
                logger.warning("apple.user_field_ignored", metadata: ["reason": "\(reason)", "bytes": "\(text.utf8.count)"])
                return SignIn.GivenUser()
            }
            guard text.utf8.count <= maximumUserBytes else { return ignored("longer than \(maximumUserBytes) bytes") }
            guard case .object(let user)? = try? JSONValue.parse(bytes: Array(text.utf8)) else { return ignored("not a JSON object") }
            for (key, value) in user {
                if ExactString.equal(key, "name"), case .object(let name) = value {
                    for (part, piece) in name {
                        guard case .string(let string) = piece, (1...255).contains(string.utf8.count) else { continue }
                        if ExactString.equal(part, "firstName") { given.name["given"] = .string(string) }
                        if ExactString.equal(part, "lastName") { given.name["family"] = .string(string) }
                    }
                }
            }
            return given
        }
    }
}
