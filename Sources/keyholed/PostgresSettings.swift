import KeyholePostgres
import NIOCore

/// `[postgres]` as read from the file (Sources/KeyholePostgres/POSTGRES.md, "Configuration"); the
/// password itself is read at start-up, like Apple's keys, so that a missing file is a start-up
/// error naming it.
struct PostgresSettings: Equatable {
    /// Where the server is.
    enum Address: Equatable {
        /// `postgres://host[:port][/database]`.
        case tcp(host: String, port: Int)
        /// A socket directory (`/run/postgresql`): the socket is `<directory>/.s.PGSQL.<port>`.
        case socket(directory: String, port: Int)
    }

    /// How the TCP connection is encrypted (a socket is never).
    enum TLS: Equatable {
        /// Plaintext.
        case disable
        /// Encrypted if the server offers it, else plaintext; the certificate not checked.
        case prefer
        /// Encrypted; the certificate not checked (PostgreSQL's own "require").
        case require
        /// Encrypted, and the server's certificate and name verified against this CA file, or the
        /// system's trust roots (`nil`): the default, as anything less lets an active attacker
        /// in the middle read the password and the sessions.
        case verify(caFile: String?)
    }

    var address: Address
    var user: String
    var password: AppleSettings.KeySource?
    var database: String
    var schema = SchemaName.standard
    var poolSize = 8
    var tls = TLS.verify(caFile: nil)
    var timeout = TimeAmount.seconds(2)
    var maxStaleness = TimeAmount.seconds(2)
    var cacheEntries = 100_000

    static let keys: Set<String> = [
        "url", "port", "user", "password_file", "password_credential", "database", "schema", "pool_size", "tls", "timeout",
        "max_staleness", "cache_entries",
    ]

    /// Reads `[postgres]`; `nil` without one.
    static func parse(_ file: ConfigFile) throws(ConfigError) -> PostgresSettings? {
        guard let section = try file.section("postgres", keys: keys) else { return nil }
        guard let url = try section.string("url") else { throw section.error("url", "is required: \"postgres://HOST[:PORT]/DATABASE\" or a socket directory such as \"/run/postgresql\"") }
        guard let user = try section.string("user"), !user.isEmpty, user.utf8.count <= 63 else {
            throw section.error("user", "is required: the PostgreSQL role keyholed logs in as (1 to 63 bytes)")
        }
        let port = try section.integer("port", in: 1...65_535)
        var address: Address
        var database: String?
        if url.hasPrefix("/") {
            guard !url.contains("\0"), url.utf8.count < 90 else { throw section.error("url", "a socket directory must be a short absolute path") }
            address = .socket(directory: url, port: port ?? 5432)
        } else {
            let parsed = try tcp(url, section: section)
            guard port == nil || parsed.port == nil else { throw section.error("port", "is given in url already") }
            address = .tcp(host: parsed.host, port: parsed.port ?? port ?? 5432)
            database = parsed.database
        }
        if let named = try section.string("database") {
            guard database == nil || database == named else { throw section.error("database", "differs from the database in url") }
            database = named
        }
        var settings = PostgresSettings(address: address, user: user, password: nil, database: database ?? user)
        settings.password = try DaemonConfiguration.keySource(section, file: "password_file", credential: "password_credential")
        if let name = try section.string("schema") {
            guard let schema = SchemaName(name) else {
                throw section.error("schema", "must be a lower-case SQL identifier of at most 48 characters, not starting pg_")
            }
            settings.schema = schema
        }
        if let size = try section.integer("pool_size", in: 3...256) { settings.poolSize = size }
        if let entries = try section.integer("cache_entries", in: 0...10_000_000) { settings.cacheEntries = entries }
        if let timeout = try section.duration("timeout", in: .milliseconds(100)...(.seconds(60))) { settings.timeout = timeout }
        if let staleness = try section.duration("max_staleness", in: .milliseconds(200)...(.seconds(60))) { settings.maxStaleness = staleness }
        if let tls = try section.string("tls") {
            switch tls {
            case "disable": settings.tls = .disable
            case "prefer": settings.tls = .prefer
            case "require": settings.tls = .require
            case "verify": settings.tls = .verify(caFile: nil)
            case let path where path.hasPrefix("/"): settings.tls = .verify(caFile: path)
            default:
                throw section.error("tls", "must be \"verify\" (the default), a CA file's absolute path, or \"require\", \"prefer\" or \"disable\" (unverified)")
            }
        }
        return settings
    }

    /// `postgres://host[:port][/database]`: no user, password or query (the password comes from a
    /// file or a credential, never this world-readable file).
    private static func tcp(_ url: String, section: ConfigFile.Section) throws(ConfigError) -> (host: String, port: Int?, database: String?) {
        let rest: Substring
        if url.hasPrefix("postgres://") {
            rest = url.dropFirst("postgres://".count)
        } else if url.hasPrefix("postgresql://") {
            rest = url.dropFirst("postgresql://".count)
        } else {
            throw section.error("url", "must be postgres://HOST[:PORT]/DATABASE or a socket directory's absolute path")
        }
        guard !rest.contains("@"), !rest.contains("?"), !rest.contains("#") else {
            throw section.error("url", "must have no user, password or query: give user, and password_file or password_credential")
        }
        let authority = rest.prefix { $0 != "/" }
        let path = rest.dropFirst(authority.count).dropFirst()
        var host = Substring(authority), port: Int?
        if let colon = authority.lastIndex(of: ":"), !authority.hasSuffix("]") {
            guard let number = Int(authority[authority.index(after: colon)...]), (1...65_535).contains(number) else {
                throw section.error("url", "has a port that is not 1 to 65535")
            }
            port = number
            host = authority[..<colon]
        }
        if host.hasPrefix("["), host.hasSuffix("]") { host = host.dropFirst().dropLast() }
        guard !host.isEmpty, host.allSatisfy({ $0.isASCII && !$0.isWhitespace }) else { throw section.error("url", "has no host") }
        guard !path.contains("/") else { throw section.error("url", "has a path past the database name") }
        return (String(host), port, path.isEmpty ? nil : String(path))
    }
}
