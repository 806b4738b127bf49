import ArgumentParser
import KeyholeProtocol
import KeyholeServer
import Logging
import ServiceLifecycle

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

    @Flag(name: .customLong("enable-debug-ops"), help: .hidden)
    var enableDebugOps = false

    func run() async throws {
        let configuration: DaemonConfiguration
        do {
            configuration = try loadConfiguration()
        } catch {
            printError("keyholed: configuration error: \(error)")
            throw ExitCode(78)
        }
        let level = configuration.logLevel
        LoggingSystem.bootstrap { label in LineLogHandler(label: label, level: level) }
        let logger = Logger(label: "keyholed")

        do {
            try StateDirectory.prepare(configuration.stateDirectory)
        } catch {
            logger.critical("keyholed.state_dir_failed", metadata: ["dir": "\(configuration.stateDirectory)", "error": "\(error)"])
            throw ExitCode(1)
        }

        let socketPath = configuration.socketPath
        let server = KeyholeServer(configuration: configuration.serverConfiguration, logger: logger) {
            logger.info("keyholed.ready", metadata: ["socket": "\(socketPath)", "pid": "\(getpid())", "version": "\(KeyholeVersion.current)"])
        }
        var lifecycleLogger = logger
        lifecycleLogger.logLevel = max(level, .notice)
        let group = ServiceGroup(configuration: .init(
            services: [.init(service: server)],
            gracefulShutdownSignals: [.sigterm, .sigint],
            logger: lifecycleLogger
        ))
        do {
            try await group.run()
        } catch let error as ServerError {
            logger.critical("keyholed.listen_failed", metadata: ["error": "\(error)"])
            throw ExitCode(1)
        } catch {
            logger.critical("keyholed.failed", metadata: ["error": "\(error)"])
            throw ExitCode(1)
        }
        logger.info("keyholed.stopped")
    }

    private func loadConfiguration() throws(ConfigError) -> DaemonConfiguration {
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
        configuration.server.enableDebugOperations = enableDebugOps
        return configuration
    }

    private func printError(_ message: String) {
        let line = message + "\n"
        line.withCString { pointer in _ = write(STDERR_FILENO, pointer, strlen(pointer)) }
    }
}
