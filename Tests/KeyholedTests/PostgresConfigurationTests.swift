import KeyholePostgres
import NIOCore
import Testing

@testable import keyholed

/// `[storage] backend` and `[postgres]` (Sources/KeyholePostgres/POSTGRES.md, "Configuration").
@Suite("configuration: PostgreSQL")
struct PostgresConfigurationTests {
    static let base = "[storage]\nbackend = \"postgres\"\n\n[postgres]\n"

    @Test("a socket directory or a postgres:// URL, with every key; defaults otherwise")
    func good() throws {
        let socket = try #require(try DaemonConfiguration.parse(Self.base + "url = \"/run/postgresql\"\nuser = \"keyhole\"\n").postgres)
        #expect(socket == PostgresSettings(address: .socket(directory: "/run/postgresql", port: 5432), user: "keyhole", password: nil, database: "keyhole"))
        #expect(socket.schema == .standard && socket.poolSize == 8 && socket.tls == .verify(caFile: nil) && socket.cacheEntries == 100_000)
        #expect(socket.timeout == .seconds(2) && socket.maxStaleness == .seconds(2))
        let tcp = try #require(try DaemonConfiguration.parse(Self.base + """
            url = "postgres://db.internal:6543/sessions"
            user = "kh"
            password_file = "/etc/keyhole/pg-password"
            schema = "site_2"
            pool_size = 4
            tls = "/etc/ssl/pg-ca.pem"
            timeout = "500ms"
            max_staleness = "1s"
            cache_entries = 0
            """).postgres)
        #expect(tcp.address == .tcp(host: "db.internal", port: 6543) && tcp.database == "sessions" && tcp.user == "kh")
        #expect(tcp.password == .file("/etc/keyhole/pg-password") && tcp.schema == SchemaName("site_2") && tcp.poolSize == 4)
        #expect(tcp.tls == .verify(caFile: "/etc/ssl/pg-ca.pem") && tcp.timeout == .milliseconds(500) && tcp.maxStaleness == .seconds(1))
        #expect(tcp.cacheEntries == 0)
        let credential = try #require(try DaemonConfiguration.parse(Self.base + """
            url = "postgresql://[::1]/keyhole"
            user = "kh"
            password_credential = "keyhole_pg"
            tls = "require"
            """).postgres)
        #expect(credential.address == .tcp(host: "::1", port: 5432) && credential.password == .credential("keyhole_pg") && credential.tls == .require)
        #expect(try DaemonConfiguration.parse("").backend == .local)
    }

    static let badFiles: [(String, String)] = [
        ("[storage]\nbackend = \"postgres\"\n", "storage.backend"),
        ("[storage]\nbackend = \"mysql\"\n", "storage.backend"),
        ("[postgres]\nurl = \"/run/postgresql\"\nuser = \"kh\"\n", "postgres"),
        (base + "user = \"kh\"\n", "postgres.url"),
        (base + "url = \"/run/postgresql\"\n", "postgres.user"),
        (base + "url = \"postgres://kh:secret@db/keyhole\"\nuser = \"kh\"\n", "postgres.url"),
        (base + "url = \"postgres://db/keyhole?sslmode=disable\"\nuser = \"kh\"\n", "postgres.url"),
        (base + "url = \"mysql://db/keyhole\"\nuser = \"kh\"\n", "postgres.url"),
        (base + "url = \"postgres://db:99999/keyhole\"\nuser = \"kh\"\n", "postgres.url"),
        (base + "url = \"postgres://db:5432/keyhole\"\nport = 5433\nuser = \"kh\"\n", "postgres.port"),
        (base + "url = \"postgres://db/a\"\ndatabase = \"b\"\nuser = \"kh\"\n", "postgres.database"),
        (base + "url = \"/run/postgresql\"\nuser = \"kh\"\nschema = \"Keyhole\"\n", "postgres.schema"),
        (base + "url = \"/run/postgresql\"\nuser = \"kh\"\nschema = \"pg_keyhole\"\n", "postgres.schema"),
        (base + "url = \"/run/postgresql\"\nuser = \"kh\"\npool_size = 0\n", "postgres.pool_size"),
        (base + "url = \"/run/postgresql\"\nuser = \"kh\"\npool_size = 2\n", "postgres.pool_size"),
        (base + "url = \"/run/postgresql\"\nuser = \"kh\"\ntls = \"verify-full\"\n", "postgres.tls"),
        (base + "url = \"/run/postgresql\"\nuser = \"kh\"\ntimeout = \"90s\"\n", "postgres.timeout"),
        (base + "url = \"/run/postgresql\"\nuser = \"kh\"\nmax_staleness = \"100ms\"\n", "postgres.max_staleness"),
        (base + "url = \"/run/postgresql\"\nuser = \"kh\"\npassword_file = \"pg\"\n", "postgres.password_file"),
        (base + "url = \"/run/postgresql\"\nuser = \"kh\"\npassword_file = \"/a\"\npassword_credential = \"b\"\n", "postgres.password_credential"),
        (base + "url = \"/run/postgresql\"\nuser = \"kh\"\npassword = \"secret\"\n", "postgres.password"),
    ]

    @Test("refused with the key at fault", arguments: badFiles)
    func bad(text: String, key: String) {
        let error = #expect(throws: ConfigError.self) { try DaemonConfiguration.parse(text) }
        #expect(error?.key == key, "\(String(describing: error))")
    }
}
