import AsyncHTTPClient
import KeyholeApple
import KeyholeJOSE
import KeyholeProtocol
import KeyholeServer
import Synchronization

/// Makes Apple's code exchange again when the configuration is reloaded, so that rotating the team's
/// `.p8` key needs no restart: the key is read again from its file (or credential), and client
/// secrets are signed with it under the reloaded team and key ids, for the reloaded endpoint.
///
/// What stays as it was at start-up: the HTTP client, and the store key, which seals the refresh
/// tokens already stored (another key would make them unreadable: changing it is a migration, not a
/// reload). Turning code exchange on or off also takes a restart (the revocations and refresh checks
/// are set up at start-up); `Reloader` keeps those settings.
final class AppleExchangeRenewal: Sendable {
    /// A new exchange, made but not yet in use.
    struct Renewed: Sendable {
        let exchange: AppleOperations.Exchange
        /// The public half of its team key.
        let key: [String: JSONValue]
        /// Whether that key is another than the one in use (the file was rewritten, or another named).
        let keyChanged: Bool
    }

    private let http: HTTPClient
    private let sealingKey: SealingKey
    private let clock: @Sendable () -> Double
    private let credentialsDirectory: String?
    /// The public half of the team key in use: what tells a new key from the same one read again.
    private let running: Mutex<[String: JSONValue]>

    /// Renewals through `http`, sealing with `sealingKey`; `key` is the team key read at start-up.
    init(
        http: HTTPClient, sealingKey: SealingKey, key: SigningKey, clock: @escaping @Sendable () -> Double, credentialsDirectory: String?
    ) {
        self.http = http
        self.sealingKey = sealingKey
        self.clock = clock
        self.credentialsDirectory = credentialsDirectory
        self.running = Mutex(key.publicJWK(alg: nil))
    }

    /// The exchange `settings` describe, its key read now. Changes nothing: a reload that fails later
    /// leaves the running exchange in use.
    ///
    /// - Throws: the configuration error of a key that cannot be read or used, naming its file.
    func make(_ settings: AppleSettings) throws(ConfigError) -> Renewed {
        guard let key = try settings.loadSigningKey(credentialsDirectory: credentialsDirectory), let teamID = settings.teamID,
            let keyID = settings.keyID
        else {
            throw ConfigError(key: "apple", line: nil, message: "code exchange needs team_id, key_id, a private key and a store key")
        }
        let publicKey = key.publicJWK(alg: nil)
        return Renewed(
            exchange: Self.exchange(http: http, teamID: teamID, keyID: keyID, key: key, sealingKey: sealingKey, endpoint: settings.endpoint, clock: clock),
            key: publicKey, keyChanged: running.withLock { $0 != publicKey })
    }

    /// Records `renewed`'s key as the one in use, once the reload put its exchange in place.
    func adopt(_ renewed: Renewed) {
        running.withLock { $0 = renewed.key }
    }

    /// Code exchange with Apple at `endpoint` through `http`: client secrets of `teamID` signed with
    /// `key` under `keyID`, dated by keyholed's clock (a test's fixed clock too), refresh tokens sealed
    /// with `sealingKey`.
    static func exchange(
        http: HTTPClient, teamID: String, keyID: String, key: SigningKey, sealingKey: SealingKey, endpoint: String,
        clock: @escaping @Sendable () -> Double
    ) -> AppleOperations.Exchange {
        var configuration = AppleClient.Configuration()
        configuration.endpoint = endpoint
        let secrets = ClientSecrets(configuration: .init(teamID: teamID, keyID: keyID), key: key, clock: ClosureClock(read: clock))
        return .init(client: AppleClient(client: http, secrets: secrets, configuration: configuration), sealingKey: sealingKey)
    }
}
