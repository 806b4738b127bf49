import KeyholeHTTP
import KeyholeProtocol
import KeyholeIssuers
import KeyholeServer
import KeyholeSystemd
import Logging
import Synchronization

/// Reads the configuration again (SIGHUP, `admin.reload`) and puts what may change while keyholed
/// runs in place: issuers and their audiences, the server's limits, session defaults, the log
/// level, Apple's client ids, redirect URIs and endpoint, and the team's key (read again from its
/// file at every reload, with its team and key ids). What cannot change live (the socket, the state
/// directory, storage, threads) keeps its running value and is named in a warning: it takes a
/// restart. A configuration that does not load changes nothing. Connections and requests in flight
/// are untouched: each request reads the settings once, and open connections keep their limits.
final class Reloader: Sendable {
    /// What the running daemon lets a reload change.
    struct Targets: Sendable {
        let registry: IssuerRegistry
        let keySets: KeySetStore
        let sessions: Reloadable<StoreOperations.Configuration>
        let apple: Reloadable<AppleOperations.Configuration>?
        /// Makes Apple's code exchange again with the team key read anew; nil without code exchange.
        let appleExchange: AppleExchangeRenewal?
        let logLevel: LogLevelControl
        let notifier: SystemdNotifier
        /// Called with the status line once a reload ends.
        let status: @Sendable () -> String
    }

    /// What a reload did.
    struct Outcome: Sendable {
        /// The keys whose new values are in use.
        var applied: [String]
        /// The keys whose new values wait for a restart.
        var needsRestart: [String]
    }

    private let load: @Sendable () throws(ConfigError) -> DaemonConfiguration
    private let targets: Targets
    private let logger: Logger
    /// The running configuration; held for a whole reload, so that two never interleave.
    private let running: Mutex<DaemonConfiguration>
    /// Set once the server exists (it is made after the operations, `admin.reload` among them).
    private let server = Mutex<KeyholeServer?>(nil)

    init(
        running: DaemonConfiguration, targets: Targets, logger: Logger,
        load: @escaping @Sendable () throws(ConfigError) -> DaemonConfiguration
    ) {
        self.running = Mutex(running)
        self.targets = targets
        self.logger = logger
        self.load = load
    }

    /// The HTTP listener, which shares the access rules; set once it exists, if it does.
    private let http = Mutex<HTTPListener?>(nil)

    /// The HTTP listener whose access rules a reload sets.
    func serve(http listener: HTTPListener) {
        http.withLock { $0 = listener }
    }

    /// The server whose limits a reload sets.
    func serve(_ server: KeyholeServer) {
        self.server.withLock { $0 = server }
    }

    /// Reloads; `trigger` names what asked (`SIGHUP`, `admin.reload`) in the log.
    func reload(trigger: String) throws(ConfigError) -> Outcome {
        targets.notifier.reloading()
        defer { targets.notifier.ready(status: targets.status()) }
        do {
            let outcome = try running.withLock { running throws(ConfigError) in try reload(&running) }
            for key in outcome.needsRestart {
                logger.warning("config.reload_needs_restart", metadata: [
                    "key": "\(key)", "reason": "cannot change while keyholed runs: the running value stays until a restart",
                ])
            }
            logger.notice("config.reloaded", metadata: [
                "trigger": "\(trigger)", "applied": "\(outcome.applied.joined(separator: ","))",
                "needs_restart": "\(outcome.needsRestart.joined(separator: ","))", "audit": "true",
            ])
            return outcome
        } catch {
            logger.error("config.reload_failed", metadata: [
                "trigger": "\(trigger)", "error": "\(error)", "kept": "the running configuration, unchanged", "audit": "true",
            ])
            throw error
        }
    }

    private func reload(_ running: inout DaemonConfiguration) throws(ConfigError) -> Outcome {
        let file = try load()
        let (effective, needsRestart) = Self.keepingRestartOnly(running, in: file)
        // Everything is checked and built before anything changes: a reload is all or nothing.
        var renewed: AppleExchangeRenewal.Renewed?
        if let apple = effective.apple {
            try Self.checkApple(apple, issuers: effective.issuers)
            // The team key read again (a rotated .p8 rewritten in place is found this way too): a
            // key that does not read fails the whole reload, and the running one stays in use. Only
            // while the file keeps code exchange on: one that turns it off (a restart's change) must
            // not fail for the old key, which may be gone.
            if apple.exchanges, file.apple?.exchanges == true, let renewal = targets.appleExchange {
                renewed = try renewal.make(apple)
            }
        }
        do {
            try effective.serverConfiguration.validate()
        } catch {
            throw ConfigError(key: "server", line: nil, message: "\(error)")
        }
        let issuers = try Keyholed.makeIssuers(
            effective.issuers, cache: effective.keySetCache, store: targets.keySets, previous: targets.registry.issuers,
            logger: logger)
        var applied = Self.liveChanges(from: running, to: effective)
        if renewed?.keyChanged == true && !applied.contains("apple.private_key") { applied.append("apple.private_key") }

        try? server.withLock { server throws(ServerError) in try server?.applyLimits(of: effective.serverConfiguration) }
        server.withLock { $0?.applyAccess(rules: effective.server.access.rules) }
        http.withLock { $0?.applyAccess(rules: effective.server.access.rules) }
        var sessions = effective.sessions
        sessions.issuers = effective.issuers.map(\.name)
        targets.sessions.replace(sessions)
        if let apple = targets.apple, let settings = effective.apple {
            var configuration = apple.current
            configuration.clientIDs = Set(settings.clientIDs)
            configuration.redirectURIs = settings.redirectURIs
            configuration.web.endpoint = settings.endpoint
            if let renewed {
                configuration.exchange = renewed.exchange
                targets.appleExchange?.adopt(renewed)
            }
            apple.replace(configuration)
        }
        targets.logLevel.level = effective.logLevel
        targets.registry.replaceIssuers(issuers)
        running = effective
        return Outcome(applied: applied, needsRestart: needsRestart)
    }

    /// The running [apple] section must still find its issuer, and its client ids among that issuer's
    /// audiences (a reload may have changed both).
    private static func checkApple(_ apple: AppleSettings, issuers: [IssuerConfiguration]) throws(ConfigError) {
        guard let issuer = issuers.first(where: { ExactString.equal($0.name, apple.issuer) }) else {
            throw ConfigError(key: "apple.issuer", line: nil, message: "the running [apple] section uses [[issuer]] '\(apple.issuer)', which the file no longer has")
        }
        for id in apple.clientIDs where !issuer.audiences.contains(id) {
            throw ConfigError(key: "apple.client_ids", line: nil, message: "'\(id.prefix(64))' is not among the audiences of [[issuer]] '\(issuer.name)'")
        }
    }
}
