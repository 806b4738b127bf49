import KeyholeStore
import Logging

/// Copies a one-host site's local store into PostgreSQL (POSTGRES.md, "From one host to several"):
/// its users, live sessions (ids, checks and times as they are: nobody is signed out) and outbox,
/// in batches each its own transaction, with `INSERT … ON CONFLICT DO NOTHING`. Run again after an
/// interruption, it adds what is missing and changes nothing already copied. Ends with `NOTIFY
/// <channel>, '*'`, so that no host keeps a view from before the copy.
///
/// The caller opens the store (taking its state directory's lock, so that no keyholed writes to it
/// meanwhile) and brings the schema up to date (`SchemaMigrator`).
public struct StoreImporter: Sendable {
    /// What a run found, kind by kind.
    public struct Report: Sendable, Equatable {
        public var users = PostgresStore.ImportCount()
        public var sessions = PostgresStore.ImportCount()
        public var outbox = PostgresStore.ImportCount()
        /// Sessions not copied because they had expired.
        public var expiredSessions = 0

        public init() {}

        /// Rows added in all.
        public var copied: Int { users.copied + sessions.copied + outbox.copied }
    }

    public let source: Store
    public let target: PostgresStore
    /// Rows per transaction.
    public var batchSize = 1000
    /// The bound on each batch's transaction: longer than a request's, as a batch is a thousand rows.
    public var batchLimit: Duration = .seconds(30)
    private let logger: Logger

    public init(source: Store, target: PostgresStore, logger: Logger) {
        self.source = source
        self.target = target
        self.logger = logger
    }

    /// Copies everything, sessions live at `now` only (an expired one would be refused there as
    /// here, and pruned). Throws at the first batch that fails: what was committed before stays,
    /// and a run again goes on from there.
    public func run(now: Int64) async throws(PostgresStoreError) -> Report {
        var report = Report()
        // Users first: a session copied without its user's record would answer without the user
        // until the record follows.
        try await inBatches(pages: { source.users(from: $0, limit: batchSize, where: { _ in true }) }) { batch throws(PostgresStoreError) in
            report.users = report.users + logged("users", try await target.importUsers(batch, within: batchLimit))
        }
        try await inBatches(pages: { cursor in
            let (found, expired, next) = source.exportSessions(from: cursor, limit: batchSize, now: now)
            report.expiredSessions += expired
            return (found, next)
        }) { batch throws(PostgresStoreError) in
            report.sessions = report.sessions + logged("sessions", try await target.importSessions(batch, within: batchLimit))
        }

        let outbox = source.outbox()
        for start in stride(from: 0, to: outbox.count, by: batchSize) {
            let batch = Array(outbox[start..<min(outbox.count, start + batchSize)])
            let count = try await target.importOutbox(batch, within: batchLimit)
            report.outbox = report.outbox + logged("outbox", count)
        }

        try await target.notifyEverything(within: batchLimit)
        return report
    }

    /// Walks the store a page at a time (`pages` from a cursor, 0 at the start and after the last)
    /// and hands `copy` full batches of `batchSize` rows, then what is left.
    private func inBatches<Row>(
        pages: (Int) -> ([Row], Int), _ copy: ([Row]) async throws(PostgresStoreError) -> Void
    ) async throws(PostgresStoreError) {
        var cursor = 0
        var rows: [Row] = []
        repeat {
            let (found, next) = pages(cursor)
            rows += found
            cursor = next
            while rows.count >= batchSize || (cursor == 0 && !rows.isEmpty) {
                let batch = Array(rows.prefix(batchSize))
                rows.removeFirst(batch.count)
                try await copy(batch)
            }
        } while cursor != 0
    }

    /// `count`, logged once its batch is committed: counts only, never a row's contents.
    private func logged(_ kind: String, _ count: PostgresStore.ImportCount) -> PostgresStore.ImportCount {
        logger.info("postgres.import_batch", metadata: ["kind": "\(kind)", "copied": "\(count.copied)", "present": "\(count.present)"])
        return count
    }
}
