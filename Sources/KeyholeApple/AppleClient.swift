import AsyncHTTPClient
import KeyholeIssuers
import KeyholeProtocol
import NIOCore
import NIOHTTP1

/// Apple's Sign in with Apple REST endpoints (`/auth/token`, `/auth/revoke`), each request carrying
/// the client secret for its client id.
///
/// Every call is bounded (connect, read and total timeouts, a body limit, no redirects), and every
/// failure is an `AppleError`: Apple's OAuth refusals as `rejected`, everything else as `unavailable`.
public struct AppleClient: Sendable {
    /// Where Apple is and how long to wait for it.
    public struct Configuration: Sendable {
        /// Apple's base URL: https, or http to a loopback host (tests).
        public var endpoint = "https://appleid.apple.com"
        /// Connecting may take this long.
        public var connectTimeout = TimeAmount.seconds(3)
        /// A whole request may take this long.
        public var totalTimeout = TimeAmount.seconds(10)
        /// The largest answer accepted.
        public var maximumBytes = 256 << 10
        /// The retry hint when Apple fails without a `Retry-After`.
        public var retryAfter = TimeAmount.seconds(5)

        /// The defaults: Apple's production endpoint.
        public init() {}
    }

    /// What the token endpoint answers. Holds tokens: it never prints them.
    public struct TokenResponse: Sendable, CustomStringConvertible, CustomReflectable {
        /// `access_token`.
        public var accessToken: String?
        /// `refresh_token` (code exchange only).
        public var refreshToken: String?
        /// `id_token`: an identity token, to verify like any other.
        public var idToken: String?
        /// `expires_in`, seconds.
        public var expiresIn: Int64?

        /// Which members are present, never their values.
        public var description: String {
            let present = [("access_token", accessToken), ("refresh_token", refreshToken), ("id_token", idToken)]
                .filter { $0.1 != nil }.map(\.0)
            return "TokenResponse(\(present.joined(separator: ", ")))"
        }

        /// No children: `dump` must not print the tokens either.
        public var customMirror: Mirror { Mirror(self, children: []) }
    }

    /// What a token is, for revocation (`token_type_hint`).
    public enum TokenKind: String, Sendable {
        case refreshToken = "refresh_token"
        case accessToken = "access_token"
    }

    let client: HTTPClient
    private let secrets: ClientSecrets
    /// Access tokens for user migration, by client id, reused until a minute before they expire.
    let migrationTokens = MigrationTokens()
    /// The configuration.
    public let configuration: Configuration

    /// A client over `client` (make it with `makeHTTPClient(configuration:)`; shut it down when done),
    /// presenting secrets from `secrets`.
    public init(client: HTTPClient, secrets: ClientSecrets, configuration: Configuration = Configuration()) {
        self.client = client
        self.secrets = secrets
        self.configuration = configuration
    }

    /// An HTTP client with the configuration's timeouts and no redirects.
    public static func makeHTTPClient(configuration: Configuration = Configuration()) -> HTTPClient {
        HTTPClient(
            eventLoopGroupProvider: .singleton,
            configuration: HTTPClient.Configuration(
                redirectConfiguration: .disallow,
                timeout: .init(connect: configuration.connectTimeout, read: configuration.totalTimeout)))
    }

    /// Exchanges an authorization code (grant_type authorization_code) for tokens. `clientID` must be
    /// the client the code was issued to; `redirectURI` is required for web (Services ID) clients.
    public func exchangeCode(_ code: String, clientID: String, redirectURI: String?) async throws(AppleError) -> TokenResponse {
        var form = [("client_id", clientID), ("client_secret", try secret(clientID)), ("code", code), ("grant_type", "authorization_code")]
        if let redirectURI { form.append(("redirect_uri", redirectURI)) }
        let response = try await tokenRequest(form, clientID: clientID, grant: "authorization code")
        guard response.idToken != nil else {
            throw .unavailable("Apple's token endpoint answered a code exchange without an id_token", retryAfterMs: retryAfterMs(nil))
        }
        return response
    }

    /// Checks that a refresh token is still good (grant_type refresh_token). `invalid_grant` means the
    /// user withdrew consent or the token was revoked.
    public func validateRefreshToken(_ refreshToken: String, clientID: String) async throws(AppleError) -> TokenResponse {
        let form = [
            ("client_id", clientID), ("client_secret", try secret(clientID)), ("grant_type", "refresh_token"),
            ("refresh_token", refreshToken),
        ]
        return try await tokenRequest(form, clientID: clientID, grant: "refresh token")
    }

    /// Revokes a token at Apple (`/auth/revoke`), as account deletion must.
    public func revoke(_ token: String, kind: TokenKind, clientID: String) async throws(AppleError) {
        let form = [
            ("client_id", clientID), ("client_secret", try secret(clientID)), ("token", token),
            ("token_type_hint", kind.rawValue),
        ]
        let answer = try await post("/auth/revoke", form: form)
        guard answer.status == .ok else { throw refusal(answer, clientID: clientID, grant: kind.rawValue) }
    }

    func secret(_ clientID: String) throws(AppleError) -> String {
        do {
            return try secrets.secret(for: clientID)
        } catch {
            // Signing with a loaded key does not fail short of libcrypto running out of memory.
            throw .unavailable("could not sign a client secret: \(error.message)", retryAfterMs: retryAfterMs(nil))
        }
    }
}
