import KeyholeProtocol
import KeyholeStore
import Logging
import NIOCore
import PostgresNIO
import Synchronization

/// Users and sessions in PostgreSQL (POSTGRES.md), for several hosts sharing one database: every
/// change is answered after PostgreSQL committed it, every call is bounded by `timeout`, identities
/// are stored and compared as bytes, and a session token is never stored (its id and check are).
///
/// `session(token:now:)` is served from a per-host cache while `PostgresListener` keeps this host's
/// view provably fresh (POSTGRES.md, "Reads"); sessions' uses are written when due (`writeTouches`).
public final class PostgresStore: Sendable {
    /// How the store behaves; the connection itself is the `PostgresClient`'s.
    public struct Configuration: Sendable {
        /// The schema the tables live in (`[postgres] schema`).
        public var schema = SchemaName.standard
        /// The bound on every call, waiting for a connection included (`[postgres] timeout`).
        public var timeout: Duration = .seconds(2)
        /// How old this host's view may be before its cache is bypassed (`[postgres] max_staleness`).
        public var maxStaleness: Duration = .seconds(2)
        /// Sessions cached on this host; 0: none (`[postgres] cache_entries`).
        public var cacheEntries = 100_000
        /// This host's name in heartbeats: unique among the hosts sharing the schema.
        public var hostID = "host"
        /// Connections for batches of cache misses, and as many for batches of session.creates
        /// (POSTGRES.md, "Cost per request"): keyholed takes a quarter of `pool_size` each.
        public var batchConnections = 2
        /// Calls in one batch at most.
        public var batchLimit = 64

        public init() {}
    }

    public let configuration: Configuration
    let client: PostgresClient
    let logger: Logger
    /// Seconds since 1970: keyholed's clock (times stored in rows).
    let now: @Sendable () -> Double
    let cache: Mutex<SessionCacheState>
    /// Freshness is measured on a monotonic clock: a wall clock stepped back must not make an old
    /// view look young (nor a test's fixed clock keep it young for ever).
    private let started = ContinuousClock.now
    /// Heartbeat numbers, never reused in this process: one sent on a connection that has since gone
    /// may still arrive on the next, and must not pass for that one's.
    let heartbeats = Atomic<UInt64>(0)
    /// Uses of sessions not yet written, written with the heartbeat that finds them due
    /// (`writeTouches`).
    let pendingTouches = Mutex<[SessionID: PendingUse]>([:])
    /// Cache misses and session.creates waiting for, or in, their batches.
    let reads: StatementBatcher<SessionReads>
    let creates: StatementBatcher<SessionCreates>

    /// A store on `client`, whose `run()` the caller runs (in keyholed's service group), on a schema
    /// `SchemaMigrator` has brought up to date. The batches of cache misses and of creates go on
    /// connections of their own to `batches` (the same server as the pool's), made when needed;
    /// `shutDown()` closes them.
    public init(
        client: PostgresClient, batches: PostgresConnection.Configuration, configuration: Configuration = Configuration(),
        now: @escaping @Sendable () -> Double, logger: Logger
    ) {
        self.client = client
        self.configuration = configuration
        self.now = now
        self.logger = logger
        var connection = batches
        connection.options.additionalStartupParameters += Self.startupParameters(for: configuration.schema) + [
            ("plan_cache_mode", "force_generic_plan"), ("application_name", "keyholed-batches"),
        ]
        let count = max(1, configuration.batchConnections), group = PostgresClient.defaultEventLoopGroup
        func connections(_ sql: String, first: Int) -> [BatchConnection] {
            (0..<count).map { index in
                BatchConnection(
                    eventLoop: group.next(), configuration: connection, sql: sql, schema: configuration.schema, id: first + index, logger: logger)
            }
        }
        let limit = max(1, configuration.batchLimit)
        reads = StatementBatcher(
            connections: connections(SessionReads.sql, first: 1), maxBatch: limit, spill: Self.readSpill, bound: configuration.timeout, doing: "reading sessions")
        creates = StatementBatcher(
            connections: connections(SessionCreates.sql, first: 1 + count), maxBatch: limit, spill: Self.createSpill, bound: configuration.timeout, doing: "creating sessions")
        cache = Mutex(SessionCacheState(capacity: configuration.cacheEntries, maxStaleness: Self.seconds(configuration.maxStaleness)))
    }

    /// Whether the cache is in use now, and how old this host's view is (nil: not fresh since the
    /// listener last connected): for `stats` and the tests.
    public var cacheStatus: (fresh: Bool, staleness: Double?, entries: Int) {
        let now = monotonic()
        return cache.withLock { ($0.isFresh(now: now), $0.staleness(now: now), $0.count) }
    }

    /// Calls waiting that open another connection for reads while one has a batch out (`BatchQueue`):
    /// a read's batch is CPU in PostgreSQL, which grows less with a batch's size than with their
    /// number. Creates open one sooner: their batch's connection sits idle through a commit's sync,
    /// and more connections overlap the syncs (PostgreSQL's group commit). Measured on 2 cores,
    /// 16 clients (misses 28 000/s spilling at 64, 25 000 at 8; creates 9 900/s at 64, 15 700 at 8).
    static let readSpill = 16
    static let createSpill = 8

    /// Writes every use not written yet, then closes the batches' connections: a cache miss or a
    /// create asked for afterwards is `unavailable`. (The pool is its client's, closed by ending its
    /// `run()`, after this.)
    public func shutDown() async {
        await writeTouches(all: true)
        await reads.shutDown()
        await creates.shutDown()
    }

    /// Batches of cache misses and of session.creates sent since the start, and the calls in them:
    /// for `stats` (how much the database's work is shared) and the tests.
    public var batchCounts: (readBatches: Int, reads: Int, createBatches: Int, creates: Int) {
        let (readBatches, reads) = self.reads.sent, (createBatches, creates) = self.creates.sent
        return (readBatches, reads, createBatches, creates)
    }

    /// Seconds on the monotonic clock freshness is measured on.
    func monotonic() -> Double { Self.seconds(ContinuousClock.now - started) }

    /// Drops what the cache holds under `key` (`s:…`, `u:…`) after this host changed it: its own
    /// answer must not wait for its listener to hear the change (and a fill in flight is refused).
    func forget(_ key: String) {
        cache.withLock { $0.heard(key) }
    }

    /// `body` in one transaction, within `limit` (the timeout by default): committed when it
    /// returns, rolled back when it throws.
    func transaction<Value: Sendable>(
        _ doing: String, within limit: Duration? = nil, _ body: @escaping @Sendable (PostgresConnection) async throws -> Value
    ) async throws(PostgresStoreError) -> Value {
        let client = self.client, logger = self.logger
        return try await Deadline.run(within: limit ?? configuration.timeout, doing: doing) {
            try await client.withTransaction(logger: logger) { connection in try await body(connection) }
        }
    }

    /// One statement (a read), within the timeout.
    func read<Value: Sendable>(
        _ doing: String, _ body: @escaping @Sendable (PostgresClient) async throws -> Value
    ) async throws(PostgresStoreError) -> Value {
        let client = self.client
        return try await Deadline.run(within: configuration.timeout, doing: doing) { try await body(client) }
    }

    static func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) / 1e18
    }

    /// What every connection of a store's pool sends when it starts: `search_path` set to the
    /// schema, so that the prepared statements (PostgresStatements), whose SQL cannot name a
    /// configured schema, find its tables; then `pg_temp`, which PostgreSQL would otherwise search
    /// first (pg_catalog, searched first too, has no table of these names).
    public static func startupParameters(for schema: SchemaName) -> [(String, String)] {
        [("search_path", "\(schema.quoted), pg_temp")]
    }

    /// Checks that the pool's connections find this store's tables without a schema (they were
    /// configured with `startupParameters(for:)`, and nothing in between, a pooler say, dropped it).
    public func checkSearchPath() async throws(PostgresStoreError) {
        let found = try await read("checking search_path") { client -> String? in
            var schema: String?
            for try await name in try await client.query("SELECT current_schema()").decode(String?.self) { schema = name }
            return schema
        }
        guard found == configuration.schema.name else {
            throw .refused(
                "the pool's connections resolve names in schema '\(found ?? "none")', not '\(configuration.schema.name)': their search_path must be the schema (a pooler may drop it)")
        }
    }

    /// `<schema>.<table>`, quoted, for SQL text.
    func table(_ name: String) -> String { configuration.schema.table(name) }

    /// Tells every host's listener that what `payload` names changed (POSTGRES.md, "Reads"); sent
    /// inside the change's transaction, so delivered only once it commits.
    func notify(_ payload: String, on connection: PostgresConnection) async throws {
        try await connection.query("SELECT pg_notify(\(configuration.schema.channel), \(payload))", logger: logger)
    }
}
