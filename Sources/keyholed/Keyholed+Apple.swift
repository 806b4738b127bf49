import AsyncHTTPClient
import KeyholeApple
import KeyholeServer
import KeyholeStore
import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What `[apple]` sets up at start-up.
struct AppleStart {
    /// The operations' configuration, its keys read.
    var configuration: AppleOperations.Configuration
    /// The HTTP client for Apple, when codes can be exchanged (shut down at exit).
    var http: HTTPClient?
    /// How a reload makes the exchange again with the team key read anew, when codes can be exchanged.
    var renewal: AppleExchangeRenewal?
}

extension Keyholed {
    /// The `[apple]` operations' configuration, its keys read; an HTTP client for Apple and the means
    /// to renew the exchange at a reload, when codes can be exchanged.
    static func apple(_ settings: AppleSettings, clock: @escaping @Sendable () -> Double) throws(ConfigError) -> AppleStart {
        let credentials = getenv("CREDENTIALS_DIRECTORY").map { String(cString: $0) }
        let keys = try settings.loadKeys(credentialsDirectory: credentials)
        var configuration = AppleOperations.Configuration(clientIDs: Set(settings.clientIDs))
        configuration.issuer = settings.issuer
        configuration.redirectURIs = settings.redirectURIs
        configuration.onRevoked = settings.refreshChecks.onRevoked
        configuration.web = settings.web
        configuration.web.endpoint = settings.endpoint
        guard settings.exchanges else { return AppleStart(configuration: configuration) }
        guard let signingKey = keys.signingKey, let sealingKey = keys.sealingKey, let teamID = settings.teamID,
            let keyID = settings.keyID
        else {
            // The parser requires all of them together; never run without what the file asks for.
            throw ConfigError(key: "apple", line: nil, message: "code exchange needs team_id, key_id, a private key and a store key")
        }
        // The endpoint is not part of the HTTP client (only its timeouts are): a reload may change it.
        let http = AppleClient.makeHTTPClient()
        configuration.exchange = AppleExchangeRenewal.exchange(
            http: http, teamID: teamID, keyID: keyID, key: signingKey, sealingKey: sealingKey, endpoint: settings.endpoint, clock: clock)
        let renewal = AppleExchangeRenewal(http: http, sealingKey: sealingKey, key: signingKey, clock: clock, credentialsDirectory: credentials)
        return AppleStart(configuration: configuration, http: http, renewal: renewal)
    }

    /// The revocations owed to Apple and the refresh-token checks, through the exchange `exchanges`
    /// gives at each call.
    static func appleBackground(
        issuer: String, store: any AppleStoring, checks: AppleRefreshChecks.Configuration, now: @escaping @Sendable () -> Double,
        logger: Logger, exchanges: @escaping @Sendable () -> AppleOperations.Exchange
    ) -> (revocations: AppleRevocations, refreshChecks: AppleRefreshChecks) {
        (AppleRevocations(issuer: issuer, store: store, exchanges: exchanges, now: now, logger: logger),
         AppleRefreshChecks(issuer: issuer, store: store, exchanges: exchanges, configuration: checks, now: now, logger: logger))
    }
}
