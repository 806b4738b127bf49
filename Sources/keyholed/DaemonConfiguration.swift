import KeyholeHTTP
import KeyholeIssuers
import KeyholeProtocol
import KeyholeServer
import KeyholeStore
import Logging
import NIOCore

/// Everything keyholed reads from its configuration file and flags.
struct DaemonConfiguration {
    /// Where the configuration is read from when `--config` is not given.
    static let defaultPath = "/etc/keyhole/keyholed.toml"

    var socketPath = KeyholeVersion.defaultSocketPath
    var socketMode: UInt32 = 0o660
    var server = KeyholeServer.Configuration()
    /// Event-loop threads (`[server] threads`): by default half the cores, at least one, because
    /// keyholed shares the host with the web apps it answers, and on a small host one loop answers
    /// single requests faster than two that contend with the apps for the cores.
    var threads = max(1, System.coreCount / 2)
    var stateDirectory = "/var/lib/keyhole"
    /// Whether keyholed may run in a user namespace that does not map every uid and gid to itself
    /// (`[server] allow_unmapped_peers`); see `UserNamespace`.
    var allowUnmappedPeers = false
    var logLevel = Logger.Level.info
    var issuers: [IssuerConfiguration] = []
    /// Sign in with Apple (`[apple]`); `nil` without the section.
    var apple: AppleSettings?
    /// The key-set cache's rules (`[jwks]`).
    var keySetCache = KeySetCacheState.Configuration()
    /// How the store writes (`[storage] fsync`, `batch_interval`).
    var store = Store.Configuration()
    /// Where users and sessions live: this host's log and snapshots, or PostgreSQL (`[postgres]`).
    var backend = StorageBackend.local
    var postgres: PostgresSettings?
    /// Session defaults and limits (`[sessions]`); the issuer names are filled in from `issuers`.
    var sessions = StoreOperations.Configuration()
    /// Whether metrics are recorded (`[metrics] enabled`): off, only the figures read when the text
    /// is made are exported.
    var metricsEnabled = true
    /// The HTTP listener (`[http]`); `nil` without the section: off.
    var http: HTTPListener.Configuration?
    /// The verified-token cache's size (`[tokens] cache_entries`); 0 turns it off.
    var verifiedTokenCacheEntries = VerifiedTokenCache.defaultCapacity

    /// The server configuration with the listener filled in.
    var serverConfiguration: KeyholeServer.Configuration {
        var configuration = server
        configuration.listener = .path(socketPath, mode: socketMode)
        configuration.threads = threads
        return configuration
    }

    /// The limits on each setting, checked for file values and flags alike.
    static let maxFrameBytesRange = 256...FrameDecoder.limit
    static let maxConnectionsRange = 1...1_000_000
    static let maxInFlightRange = 1...65_536
    static let maxUnsentBytesRange = (64 << 10)...(1 << 30)
    static let threadsRange = 1...256
    static let backlogRange = 1...65_535
    static let timeoutRange = TimeAmount.milliseconds(10)...TimeAmount.hours(24 * 30)
    /// How long a frame error holds its uid's slot: "0s" (off) to 10 minutes.
    static let frameErrorHoldRange = TimeAmount.zero...TimeAmount.minutes(10)

    /// Checks a path given for `key`: absolute, and short enough where it names a socket.
    static func checkPath(_ path: String, key: String, line: Int?, socket: Bool = false) throws(ConfigError) {
        guard path.hasPrefix("/") else {
            throw ConfigError(key: key, line: line, message: "must be an absolute path, got '\(path)'")
        }
        if socket && path.utf8.count > 107 {
            throw ConfigError(key: key, line: line, message: "a Unix socket path must be at most 107 bytes long")
        }
    }

    /// Parses a log level name for `key`.
    static func logLevel(_ text: String, key: String, line: Int?) throws(ConfigError) -> Logger.Level {
        guard let level = Logger.Level(rawValue: text) else {
            let names = Logger.Level.allCases.map(\.rawValue).joined(separator: ", ")
            throw ConfigError(key: key, line: line, message: "unknown log level '\(text)' (one of: \(names))")
        }
        return level
    }
}

/// `[storage] backend`.
enum StorageBackend: String, Equatable {
    case local, postgres
}
