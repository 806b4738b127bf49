import NIOCore
import NIOPosix
import ArgumentParser
import AsyncHTTPClient
import KeyholeApple
import KeyholeHTTP
import KeyholeIssuers
import KeyholeJOSE
import KeyholeProtocol
import KeyholeServer
import KeyholeSocketLoop
import KeyholeStore
import KeyholeSystemd
import Logging
import ServiceLifecycle
import Synchronization
import UnixSignals

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// keyholed: the Keyhole daemon.
@main
struct Keyholed: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keyholed",
        abstract: "Keyhole's local authentication daemon.",
        discussion: "Exit status: 0 after a clean stop, 78 (EX_CONFIG) on a configuration error, 1 on any other failure.",
        version: KeyholeVersion.current
    )

    @Option(help: "The configuration file (TOML). Without it, \(DaemonConfiguration.defaultPath) if it exists, else built-in defaults.")
    var config: String?

    @Option(help: "The Unix socket to listen on; overrides [server] socket.")
    var socket: String?

    @Option(name: .customLong("state-dir"), help: "The state directory; overrides [storage] dir.")
    var stateDir: String?

    @Option(name: .customLong("log-level"), help: "trace, debug, info, notice, warning, error or critical; overrides [log] level.")
    var logLevel: String?

    @Option(help: "The event loop serving the socket, nio or epoll; overrides [server] loop.")
    var loop: String?

    @Flag(help: "Cut the write-ahead log at its first damaged record (keeping a copy of what is cut under <state-dir>/wal/cut-<time>/), say how many records were lost, and exit without serving.")
    var repair = false

    @Flag(
        name: .customLong("migrate-to-postgres"),
        help: "Copy the users, sessions and outbox of the local store in the state directory into the configuration's [postgres] (keyholed stopped; run again after an interruption to go on), print what was copied, and exit without serving.")
    var migrateToPostgres = false

    @Flag(name: .customLong("enable-debug-ops"), help: .hidden)
    var enableDebugOps = false

    /// Verify tokens as if it were this moment (seconds since 1970): tests only, with --enable-debug-ops.
    @Option(name: .customLong("fixed-clock"), help: .hidden)
    var fixedClock: Double?

    func run() async throws {
        let configuration: DaemonConfiguration
        do {
            configuration = try Self.loadConfiguration(overrides)
        } catch {
            printError("keyholed: configuration error: \(error)")
            throw ExitCode(78)
        }
        // A one-shot copy of the local store: it serves nothing, so nothing below concerns it.
        if migrateToPostgres { return try await migrateStore(configuration) }
        // Access control rests on peers' real uids and gids: refuse a user namespace that hides them.
        if let problem = UserNamespace.problem() {
            guard configuration.allowUnmappedPeers else {
                printError("keyholed: \(problem)")
                throw ExitCode(78)
            }
            printError("keyholed: warning: \(problem) ([server] allow_unmapped_peers = true: starting anyway)")
        }
        // Socket activation: taken (and LISTEN_FDS unset) before any thread starts.
        let adopted: ListenSockets.Adopted?
        var adoptedHTTP: ListenSockets.Adopted?
        do {
            let taken = try ListenSockets.take(named: "keyhole", others: ["http"])
            (adopted, adoptedHTTP) = (taken.main, taken.others["http"])
        } catch {
            printError("keyholed: \(error)")
            throw ExitCode(78)
        }
        // Before anything uses NIO's shared event-loop group, which the server and the fetchers share.
        NIOSingletons.groupLoopCountSuggestion = configuration.threads
        // SIGHUP trapped now, long before READY=1: one sent as soon as keyholed says it is ready waits in
        // the sequence for the reload service, however late that starts. (Ignoring it until the service
        // listened lost a SIGHUP sent in between, seen under load in make test; SIGHUP's default would
        // end keyholed.)
        let hangups = await UnixSignalsSequence(trapping: .sighup)
        // Before anything makes a metric handle (the server makes its own when it is built).
        let exporter = Self.bootstrapMetrics(enabled: configuration.metricsEnabled)
        let level = LogLevelControl(configuration.logLevel)
        Self.bootstrapLogging(level: level)
        let logger = Logger(label: "keyholed")
        let notifier = SystemdNotifier()

        do {
            try StateDirectory.prepare(configuration.stateDirectory)
        } catch {
            logger.critical("keyholed.state_dir_failed", metadata: ["dir": "\(configuration.stateDirectory)", "error": "\(error)"])
            throw ExitCode(error.isConfiguration ? 78 : 1)
        }

        // A write past RLIMIT_FSIZE must fail with EFBIG (storage_unavailable), not kill the daemon.
        signal(SIGXFSZ, SIG_IGN)
        // --fixed-clock: a clock that stands still until a test moves it (debug.advance_clock).
        let fixed = fixedClock.map(TestClock.init(start:))
        let clock: @Sendable () -> Double = {
            if let fixed { return fixed.now }
            var now = timespec()
            clock_gettime(CLOCK_REALTIME, &now)
            return Double(now.tv_sec) + Double(now.tv_nsec) / 1e9
        }
        // Whole seconds (sessions' times, on every session.get) from the coarse clock: the time of the
        // kernel's last tick, read from memory without a read of the hardware timer (6.5 ns a read on
        // this VM, against 22 ns). A tick (1 to 10 ms, as the kernel is built) is nothing next to a
        // second; it only ever lags the precise clock.
        let seconds: @Sendable () -> Int64 = {
            if let fixed { return Int64(fixed.now.rounded(.down)) }
            var now = timespec()
            clock_gettime(CLOCK_REALTIME_COARSE, &now)
            return Int64(now.tv_sec)
        }
        // Users and sessions: this host's log and snapshots, or PostgreSQL shared by several hosts.
        var pool: Task<Void, Never>?
        defer { pool?.cancel() }
        let sessionStore: Store?
        let shared: PostgresStorage?
        switch (configuration.backend, configuration.postgres) {
        case (.postgres, let settings?):
            guard !repair else {
                printError("keyholed: --repair is for the local store; PostgreSQL keeps its own data")
                throw ExitCode(78)
            }
            shared = try await Self.openPostgres(settings, clock: clock, pool: &pool, logger: logger)
            sessionStore = nil
        default:
            guard let local = openStore(configuration, now: seconds(), logger: logger) else { throw ExitCode(1) }
            if repair { return }
            (sessionStore, shared) = (local, nil)
        }

        let store = KeySetStore(stateDirectory: configuration.stateDirectory)
        let issuers: [IssuerKeys]
        do {
            issuers = try Self.makeIssuers(configuration.issuers, cache: configuration.keySetCache, store: store, logger: logger)
        } catch {
            printError("keyholed: configuration error: \(error)")
            throw ExitCode(78)
        }
        let cacheEntries = configuration.verifiedTokenCacheEntries
        let registry = IssuerRegistry(
            issuers: issuers, cache: cacheEntries > 0 ? VerifiedTokenCache(capacity: cacheEntries) : nil,
            encoder: TokenOperations.encode)
        var sessionConfiguration = configuration.sessions
        sessionConfiguration.issuers = configuration.issuers.map(\.name)
        let apple: AppleStart?
        do {
            apple = try configuration.apple.map { settings throws(ConfigError) in try Self.apple(settings, clock: clock) }
        } catch {
            printError("keyholed: configuration error: \(error)")
            throw ExitCode(78)
        }
        // What Sign in with Apple keeps, in whichever store keeps users.
        let appleStore: any AppleStoring = sessionStore?.awaited ?? shared!.store.storing
        // Revocations owed and refresh-token checks: only with code exchange, which stores tokens.
        let appleSettings = apple.map { Reloadable($0.configuration) }
        let background: (revocations: AppleRevocations, refreshChecks: AppleRefreshChecks)? =
            if let settings = configuration.apple, let appleSettings, let issuer = apple?.configuration.issuer,
                let first = apple?.configuration.exchange
            {
                Self.appleBackground(
                    issuer: issuer, store: appleStore, checks: settings.refreshChecks, now: clock, logger: logger,
                    // The exchange in use at each call: a reload may have put a new team key in place
                    // (it is never removed while keyholed runs: turning code exchange off takes a restart).
                    exchanges: { appleSettings.current.exchange ?? first })
            } else {
                nil
            }
        let revocations = background?.revocations
        // Owed revocations wait in the log for a configuration that can send them; say so rather
        // than keep them silently.
        if background == nil, let sessionStore, case let owed = sessionStore.outbox(kind: AppleRevocations.kind).count, owed > 0 {
            logger.warning(
                "apple.revocations_waiting",
                metadata: ["count": "\(owed)", "reason": "no [apple] code exchange configured: they are kept and sent once it is"])
        }
        let sessionSettings = Reloadable(sessionConfiguration)
        let status: @Sendable () -> String = {
            guard let sessionStore else {
                let fresh = shared?.store.cacheStatus.fresh == true
                return "serving from PostgreSQL, \(registry.issuers.count) issuers\(fresh ? "" : "; cache bypassed (not fresh)")"
            }
            let figures = sessionStore.statistics
            let storage = figures.failure.map { "; storage failing: \($0)" } ?? ""
            return "serving: \(figures.sessions) sessions, \(figures.users) users, \(registry.issuers.count) issuers\(storage)"
        }
        let overrides = overrides
        let reloader = Reloader(
            running: configuration,
            targets: .init(
                registry: registry, keySets: store, sessions: sessionSettings, apple: appleSettings, appleExchange: apple?.renewal,
                logLevel: level,
                notifier: notifier, status: status),
            logger: logger
        ) { () throws(ConfigError) in try Self.loadConfiguration(overrides) }
        // One web flow for the operations and the HTTP listener's pages: an authorization started one
        // way completes the other, under the same bounds.
        let webSignIn = AppleWebSignIn(configuration: appleSettings, registry: registry, store: appleStore, sessions: sessionSettings, now: clock)
        var storeOperations =
            if let sessionStore {
                StoreOperations.make(store: sessionStore, configuration: sessionSettings, revocations: revocations, now: seconds)
            } else {
                SharedStoreOperations.make(store: shared!.store.storing, configuration: sessionSettings, revocations: revocations, now: seconds)
            }
        storeOperations.merge(
            AppleOperations.make(
                configuration: appleSettings, registry: registry, store: appleStore, sessions: sessionSettings, revocations: revocations,
                refreshChecks: background?.refreshChecks, web: webSignIn, now: clock)
        ) { $1 }
        let operations = TokenOperations.make(registry: registry, now: clock)
            .merging(KeySetOperations.make(registry: registry)) { $1 }
            .merging(storeOperations) { $1 }
            .merging(["admin.reload": reloader.operation]) { $1 }

        var serverConfiguration = configuration.serverConfiguration
        serverConfiguration.testClock = fixed
        if let adopted {
            serverConfiguration.listener = .descriptor(adopted.descriptor)
            logger.info("systemd.socket_adopted", metadata: ["socket": "\(adopted)", "ignored": "\(configuration.socketPath)"])
        }
        let socketPath = adopted.map { "\($0)" } ?? configuration.socketPath
        // Ready (to systemd, and in the log) once every listener accepts connections.
        let listenersToCome = Mutex(configuration.http == nil ? 1 : 2)
        let listening: @Sendable () -> Void = {
            guard listenersToCome.withLock({ count -> Bool in
                count -= 1
                return count == 0
            }) else { return }
            logger.info("keyholed.ready", metadata: ["socket": "\(socketPath)", "pid": "\(getpid())", "version": "\(KeyholeVersion.current)"])
            notifier.ready(status: status())
        }
        let server = KeyholeServer(
            configuration: serverConfiguration,
            operations: operations,
            statistics: {
                var figures = sessionStore.map(StoreOperations.statistics) ?? shared?.statistics ?? [:]
                if let background {
                    figures["apple"] = .object(AppleOperations.statistics(revocations: background.revocations, refreshChecks: background.refreshChecks))
                }
                return figures
            },
            metrics: exporter.text,
            logger: logger,
            onListening: listening
        )
        reloader.serve(server)
        let sharedStoreUp: (@Sendable () -> Bool)? =
            if let shared { { shared.store.cacheStatus.fresh } } else { nil }
        Self.collectMetrics(exporter, server: server, store: sessionStore, registry: registry, apple: background, sharedStoreUp: sharedStoreUp)
        let sessions: HTTPListener.Sessions = sessionStore.map { .local($0) } ?? .shared(shared!.store.storing)
        let health: @Sendable () -> HTTPListener.Health = {
            if let sessionStore { return sessionStore.statistics.failure == nil ? .ok : .storageFailed }
            // PostgreSQL: healthy while this host's view is fresh (the listener hears its heartbeats).
            return shared?.store.cacheStatus.fresh == true ? .ok : .storageFailed
        }
        let http = configuration.http.map { settings in
            var settings = settings
            if let adoptedHTTP {
                settings.socket = .descriptor(adoptedHTTP.descriptor)
                logger.info("systemd.socket_adopted", metadata: ["socket": "\(adoptedHTTP)"])
            }
            return HTTPListener(
                configuration: settings, store: sessions, access: serverConfiguration.access, now: seconds,
                health: health, metrics: exporter.text, web: webSignIn,
                logger: logger, onListening: listening)
        }
        if let adoptedHTTP, http == nil {
            // Off unless configured: a socket systemd passed for it is not served.
            logger.warning("http.socket_not_configured", metadata: ["socket": "\(adoptedHTTP)", "reason": "no [http] section: not served"])
            close(adoptedHTTP.descriptor)
        }
        if let http { reloader.serve(http: http) }
        // The watchdog is stopped last (services stop in reverse order), the status first.
        let watchdog: [ServiceGroupConfiguration.ServiceConfiguration] = (notifier.isEnabled ? notifier.watchdogInterval() : nil).map { interval in
            [.init(service: Watchdog(
                configuration: .init(interval: interval), notifier: notifier, logger: logger,
                check: Self.healthCheck(server: server, store: sessionStore, interval: interval)))]
        } ?? []
        let systemdStatus: [ServiceGroupConfiguration.ServiceConfiguration] =
            notifier.isEnabled ? [.init(service: SystemdStatus(notifier: notifier, status: status))] : []
        let lifecycleLogger = Logger(label: LogLevelControl.lifecycleLabel)
        let group = ServiceGroup(configuration: .init(
            // Stopped in reverse order: the server drains its requests while keys still refresh and
            // changes still commit; the committer then flushes what is queued.
            // A service that ends early (a listener that cannot bind) shuts the others down
            // gracefully: cancelled instead, a server waiting for its drain would never return, and
            // keyholed would hang half alive, deaf to SIGTERM.
            services: (watchdog + [
                .init(service: KeySetRefresher(registry: registry, store: store, logger: logger)),
            ] + (sessionStore.map { sessionStore in [
                .init(service: StoreCommitter(store: sessionStore, logger: logger)),
                .init(service: StoreSnapshotter(store: sessionStore, now: seconds, logger: logger)),
                .init(service: SessionSweeper(store: sessionStore, now: seconds, logger: logger)),
            ] } ?? []) + (shared?.services ?? []) + (background.map { [.init(service: $0.revocations), .init(service: $0.refreshChecks)] } ?? []) + [
                .init(service: server),
            ] + (http.map { [.init(service: $0)] } ?? []) + [
                .init(service: ReloadSignals(reloader: reloader, signals: hangups)),
            ] + systemdStatus).map {
                .init(service: $0.service, successTerminationBehavior: .gracefullyShutdownGroup, failureTerminationBehavior: .gracefullyShutdownGroup)
            },
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: lifecycleLogger
        ))
        var failure: (any Error)?
        do {
            try await group.run()
        } catch {
            failure = error
        }
        if let http = apple?.http { try? await http.shutdown() }
        await shared?.store.shutDown()
        if let error = failure as? ServerError {
            logger.critical("keyholed.listen_failed", metadata: ["error": "\(error)"])
            // Under the packaged units the HTTP socket is systemd's (keyholed-http.socket): one that
            // was not passed is bound here, where the sandboxed unit cannot write.
            if adopted != nil, http != nil, adoptedHTTP == nil {
                printError("keyholed: [http] is set and systemd passed no socket named 'http': enable keyholed-http.socket (systemctl enable keyholed-http.socket; systemctl stop keyholed.service; systemctl start keyholed-http.socket), or remove [http]")
            }
            throw ExitCode(1)
        } else if let failure {
            logger.critical("keyholed.failed", metadata: ["error": "\(failure)"])
            throw ExitCode(1)
        }
        logger.info("keyholed.stopped")
    }

    /// Opens (or with `--repair`, repairs) the users and sessions; `nil` after logging why it cannot.
    private func openStore(_ configuration: DaemonConfiguration, now: Int64, logger: Logger) -> Store? {
        let directory = configuration.stateDirectory
        let store: Store
        let report: Store.OpenReport
        let started = ContinuousClock.now
        do {
            (store, report) = try Store.open(stateDirectory: directory, configuration: configuration.store, repair: repair, now: now)
        } catch {
            if error.isCorruption {
                logger.critical("storage.corrupt", metadata: ["error": "\(error.message)"])
                printError("keyholed: \(error.message). Nothing was changed. `keyholed --repair` (with the same --config and --state-dir) cuts the log at the damage (or sets an unreadable snapshot aside), keeping a copy of what it cuts, and says how many records are lost.")
            } else if error.isLocked {
                logger.critical("storage.locked", metadata: ["error": "\(error.message)"])
            } else {
                logger.critical("storage.open_failed", metadata: ["error": "\(error.message)"])
            }
            return nil
        }
        for warning in report.warnings {
            logger.warning("storage.recovered_tail", metadata: ["detail": "\(warning)"])
        }
        // Changes a request makes are committed by its event loop once the loop has read what is ready
        // (`[storage] commit_on_event_loop`); those made elsewhere (tasks) by the committer thread.
        store.commitInline { commit in
            if let loop = SocketLoop.current {
                loop.execute(commit)
                return true
            }
            guard let loop = MultiThreadedEventLoopGroup.currentEventLoop else { return false }
            loop.execute(commit)
            return true
        }
        let figures = store.statistics
        let took = started.duration(to: .now).components
        logger.info("storage.opened", metadata: [
            "ms": "\(took.seconds * 1000 + took.attoseconds / 1_000_000_000_000_000)",
            "dir": "\(directory)", "records_replayed": "\(report.replayed)", "sessions": "\(figures.sessions)",
            "users": "\(figures.users)", "expired_dropped": "\(report.expired)",
            "snapshot_lsn": "\(report.snapshotLSN.map(String.init) ?? "none")", "wal_bytes": "\(figures.walBytes)",
        ])
        if repair {
            if let cut = report.cutDirectory {
                let snapshots = report.lostSnapshots > 0 ? " and \(report.lostSnapshots) unreadable snapshot(s) set aside" : ""
                logger.notice("storage.repaired", metadata: [
                    "records_lost": "\(report.lostRecords)", "snapshots_lost": "\(report.lostSnapshots)", "kept_in": "\(cut)",
                ])
                printError("keyholed: repaired: \(report.lostRecords) records lost\(snapshots); what was cut is in \(cut)")
            } else {
                printError("keyholed: nothing to repair in \(directory)")
            }
        }
        return store
    }

    /// What the command line sets, applied over the file at start-up and at each reload.
    struct Overrides: Sendable {
        var config: String?
        var socket: String?
        var stateDir: String?
        var logLevel: String?
        var enableDebugOps: Bool
        var fixedClock: Double?
        var loop: String?
    }

    private var overrides: Overrides {
        Overrides(config: config, socket: socket, stateDir: stateDir, logLevel: logLevel, enableDebugOps: enableDebugOps, fixedClock: fixedClock, loop: loop)
    }

    private static func loadConfiguration(_ overrides: Overrides) throws(ConfigError) -> DaemonConfiguration {
        let (config, socket, stateDir, logLevel) = (overrides.config, overrides.socket, overrides.stateDir, overrides.logLevel)
        var configuration = try DaemonConfiguration.load(path: config ?? DaemonConfiguration.defaultPath, required: config != nil)
        if let socket {
            try DaemonConfiguration.checkPath(socket, key: "--socket", line: nil, socket: true)
            configuration.socketPath = socket
        }
        if let stateDir {
            try DaemonConfiguration.checkPath(stateDir, key: "--state-dir", line: nil)
            configuration.stateDirectory = stateDir
        }
        if let logLevel {
            configuration.logLevel = try DaemonConfiguration.logLevel(logLevel, key: "--log-level", line: nil)
        }
        if let loop = overrides.loop {
            guard let chosen = KeyholeServer.Loop(rawValue: loop) else {
                throw ConfigError(key: "--loop", line: nil, message: "must be \"nio\" or \"epoll\", got '\(loop)'")
            }
            configuration.server.loop = chosen
        }
        configuration.server.enableDebugOperations = overrides.enableDebugOps
        if let fixed = overrides.fixedClock {
            guard overrides.enableDebugOps else {
                throw ConfigError(key: "--fixed-clock", line: nil, message: "is for tests and needs --enable-debug-ops")
            }
            guard fixed.isFinite, (0...TestClock.latest).contains(fixed) else {
                throw ConfigError(key: "--fixed-clock", line: nil, message: "must be seconds since 1970, up to the end of 9999")
            }
        }
        return configuration
    }

    private func printError(_ message: String) {
        let line = message + "\n"
        line.withCString { pointer in _ = write(STDERR_FILENO, pointer, strlen(pointer)) }
    }
}
