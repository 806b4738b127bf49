import KeyholeIssuers
import KeyholeJOSE
import KeyholeProtocol
import Synchronization

/// The client secrets keyholed presents to Apple's token endpoint: ES256 JWTs signed with the team's
/// `.p8` key, one per client id, made once and reused until a day before they expire.
///
/// Apple's rules (TN3107, "Creating a client secret"): header `alg` ES256 and `kid` the key id; claims
/// `iss` the team id, `iat`, `exp` at most 15 777 000 s (six months) after `iat`, `aud`
/// `https://appleid.apple.com`, `sub` the client id (the bundle id or Services id whose code is
/// exchanged). `iat` is set a minute back, so a server whose clock runs slightly ahead of Apple's
/// still accepts it.
public final class ClientSecrets: Sendable {
    /// Whether `text` has the form of Apple's team and key ids: ten capital letters and digits.
    public static func isAppleIdentifier(_ text: String) -> Bool {
        text.utf8.count == 10 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) }
    }

    /// What the secrets say and how long they live.
    public struct Configuration: Sendable {
        /// The Apple Developer team id (`iss`).
        public var teamID: String
        /// The id of the `.p8` key (`kid`).
        public var keyID: String
        /// How long a secret is valid, in seconds; capped at `maximumLifetime`.
        public var lifetime: Int64 = 30 * 86_400
        /// A secret is replaced this long before it expires (at most half its lifetime).
        public var renewBefore: Int64 = 86_400
        /// The `aud` Apple expects.
        public var audience = "https://appleid.apple.com"

        /// The longest lifetime Apple accepts: `exp` no more than 15 777 000 s after `iat`.
        public static let maximumLifetime: Int64 = 15_777_000
        /// How far `iat` is set back.
        public static let backdate: Int64 = 60

        /// The configuration of a team's key.
        public init(teamID: String, keyID: String) {
            self.teamID = teamID
            self.keyID = keyID
        }
    }

    /// One secret and when it stops being used.
    struct Cached: Sendable {
        var secret: String
        var expiresAt: Int64
        var renewAt: Int64
    }

    /// The configuration.
    public let configuration: Configuration
    private let key: SigningKey
    private let clock: any KeySetClock
    private let cache = Mutex<[String: Cached]>([:])

    /// Secrets signed with `key`, timed by `clock`.
    public init(configuration: Configuration, key: SigningKey, clock: any KeySetClock = SystemKeySetClock()) {
        self.configuration = configuration
        self.key = key
        self.clock = clock
    }

    /// The secret for `clientID`: the cached one while it is not due for renewal, else a new one.
    /// One is cached per client id asked for: callers pass configured client ids only.
    ///
    /// - Throws: `key_invalid` if the key cannot sign, which a key that loaded never does.
    public func secret(for clientID: String) throws(JOSEError) -> String {
        let now = Int64(clock.now().rounded(.down))
        if let cached = cache.withLock({ $0[clientID] }), now < cached.renewAt { return cached.secret }
        let made = try make(for: clientID, now: now)
        cache.withLock { $0[clientID] = made }
        return made.secret
    }

    /// A new secret for `clientID` issued at `now` (less the backdate).
    func make(for clientID: String, now: Int64) throws(JOSEError) -> Cached {
        let issuedAt = now - Configuration.backdate
        let lifetime = max(Configuration.backdate * 2, min(configuration.lifetime, Configuration.maximumLifetime))
        let expiresAt = issuedAt + lifetime
        let claims: [String: JSONValue] = [
            "iss": .string(configuration.teamID),
            "iat": .int(issuedAt),
            "exp": .int(expiresAt),
            "aud": .string(configuration.audience),
            "sub": .string(clientID),
        ]
        let secret = try key.signJWT(claims: claims, kid: configuration.keyID)
        let renewBefore = max(0, min(configuration.renewBefore, lifetime / 2))
        return Cached(secret: secret, expiresAt: expiresAt, renewAt: expiresAt - renewBefore)
    }
}
