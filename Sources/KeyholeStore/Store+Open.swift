#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension Store {
    /// What start-up found and did.
    public struct OpenReport: Sendable {
        /// The snapshot loaded, if any: its start LSN.
        public var snapshotLSN: UInt64?
        /// Sessions it held.
        public var snapshotSessions = 0
        /// Records replayed from the log.
        public var replayed = 0
        /// Sessions dropped because they had expired.
        public var expired = 0
        /// Torn tails dropped, `--repair`'s cuts: one line each, for the log.
        public var warnings: [String] = []
        /// Records `--repair` cut.
        public var lostRecords = 0
        /// Snapshots `--repair` set aside because they could not be read.
        public var lostSnapshots = 0
        /// Where `--repair` kept what it cut.
        public var cutDirectory: String?
    }

    /// Opens the store in `stateDirectory` (which must exist): locks it, loads the newest snapshot
    /// (SNAPSHOT.md, "Reading"), recovers the log after it (WAL.md, "Reading and recovery"), replays it
    /// and drops expired sessions. The committer starts with `startCommitter`.
    ///
    /// - Parameter repair: set an unreadable snapshot aside and cut the log at the first corruption
    ///   instead of refusing to start, keeping a copy of what was cut.
    /// - Throws: `StoreError.locked` when another process holds the directory, `.corrupt` naming the
    ///   file and offset, `.io`.
    public static func open(
        stateDirectory: String, configuration: Configuration = Configuration(), repair: Bool = false, now: Int64
    ) throws(StoreError) -> (Store, OpenReport) {
        StoreMetrics.register()
        let lock = try StateDirectoryLock(stateDirectory: stateDirectory)
        let directory = WALDirectory(stateDirectory: stateDirectory, syncDirectory: configuration.syncDirectory)
        let snapshots = SnapshotDirectory(stateDirectory: stateDirectory, syncDirectory: configuration.syncDirectory)
        try syncEntry(of: stateDirectory, configuration: configuration)
        try directory.create()
        var report = OpenReport()
        var cutDirectory: String?
        func cut() throws(StoreError) -> String {
            if let cutDirectory { return cutDirectory }
            let made = try directory.makeCutDirectory(now: now)
            cutDirectory = made
            return made
        }

        var tables = StoreTables()
        var snapshotLSN: UInt64 = 0
        // The size the next snapshot's threshold scales (`snapshotWALPercent`). (Not a field of
        // `OpenReport`: one more made `open`'s typed throw crash its callers in debug builds, a
        // compiler fault seen with Swift 6.3.1.)
        var snapshotBytes = 0
        for candidate in try snapshots.list().reversed() {
            do throws(StoreError) {
                var loaded = StoreTables()
                let header = try SnapshotReader.load(candidate.path, into: &loaded)
                tables = loaded
                snapshotLSN = header.startLSN - 1
                report.snapshotLSN = header.startLSN
                report.snapshotSessions = Int(header.sessions)
                var status = stat()
                snapshotBytes = stat(candidate.path, &status) == 0 ? Int(status.st_size) : 0
                break
            } catch where repair && error.isCorruption {
                let name = String(candidate.path.split(separator: "/").last!)
                let moved = try cut() + "/" + name
                guard rename(candidate.path, moved) == 0 else { throw .io("cannot move \(candidate.path): \(WALDirectory.error())") }
                report.lostSnapshots += 1
                report.warnings.append("\(error.message); moved to \(moved), and what only it held is lost")
            }
        }
        if report.lostSnapshots > 0 { try snapshots.syncDirectory() }

        let files = try directory.segmentFiles()
        if report.lostSnapshots > 0, let first = files.first,
            let header = WALSegmentHeader(try WALDirectory.readFile(first.path)) {
            // Without the snapshot that covered the log before it, replay what log there is.
            snapshotLSN = max(snapshotLSN, header.firstLSN - 1)
        }
        // The log is read a segment at a time, and each record decoded once and applied as it is
        // accepted: no copy of the log or of its records is held.
        // The log's size bounds its creates only loosely (touches and revocations are records too), and
        // with `snapshotWALPercent` the log may be as large as the snapshot: room for at most as many
        // again as the snapshot holds (or a million), not for the bound, which would hold memory that
        // is never given back; the tables grow as they fill past it.
        let logged = files.reduce(0) { $0 + WALDirectory.fileSize($1.path) } / StoreRecord.smallestCreateBytes
        tables.reserve(sessions: tables.sessionCount + min(logged, max(tables.sessionCount, 1 << 20)), principals: 0)
        let plan = try WALRecovery.plan(
            files: files, read: { index throws(StoreError) in try WALDirectory.readFile(files[index].path) },
            readHeader: { index throws(StoreError) in try WALDirectory.readPrefix(files[index].path, count: WALSegmentHeader.size) },
            snapshotLSN: snapshotLSN, repair: repair,
            parse: { _, record in
                StoreRecord(record).map { .success($0) }
                    ?? .failure(WALRecovery.Unusable("a record of type 0x\(String(record.type, radix: 16)) that does not parse"))
            },
            apply: { _, record in tables.apply(record) })
        report.warnings += plan.warnings
        report.lostRecords = plan.lostRecords
        if plan.repaired { try directory.preserveCut(of: plan, in: try cut()) }
        report.cutDirectory = cutDirectory
        try directory.apply(plan)
        // As PostgreSQL does at the end of recovery: what was replayed is made durable before anything
        // that depends on it is served. Only the last segment can hold records never synced (the writer
        // syncs each segment before it starts the next).
        if let last = plan.segments.last(where: { !plan.remove.contains($0.sequence) }) {
            try directory.syncSegment(last.sequence, with: configuration.syncData)
        }
        report.replayed = plan.replayed
        var cursor = 0
        repeat {
            let (removed, next) = tables.sweep(now: now, from: cursor, limit: 1 << 20)
            report.expired += removed
            cursor = next
        } while cursor != 0

        if report.lostSnapshots > 0 {
            // The log left may not start at LSN 1: a snapshot of what was recovered makes the next
            // start-up (without --repair) see a whole state again.
            let writer = try SnapshotWriter(directory: snapshots, startLSN: plan.lastLSN + 1)
            var index: UInt64 = 0
            var bytes: [UInt8] = []
            try writer.write(bytes, tables.appendOutbox(index: &index, to: &bytes))
            bytes.removeAll()
            let (_, count) = tables.appendEntries(from: 0, limit: Int.max, index: &index, to: &bytes)
            try writer.write(bytes, count)
            snapshotBytes = try writer.finish(createdAt: now)
            report.snapshotLSN = plan.lastLSN + 1
        }

        // What a snapshot covers and a crash left behind: older snapshots, segments before its start
        // (recovery did not read them: any of them may be missing).
        if let snapshot = report.snapshotLSN { try snapshots.removeSnapshots(before: snapshot) }
        _ = try directory.removeSegments(plan.covered)

        var writerConfiguration = WALWriter.Configuration()
        writerConfiguration.segmentBytes = configuration.segmentBytes
        writerConfiguration.syncData = configuration.syncData
        let writer = try WALWriter(directory: directory, plan: plan, configuration: writerConfiguration)
        let walBytes = plan.keptBytes
        let store = Store(
            configuration: configuration, tables: tables, writer: writer, lock: lock, walDirectory: directory,
            snapshots: snapshots, walBytes: walBytes, snapshotBytes: snapshotBytes)
        return (store, report)
    }

    /// Makes the state directory's entry in its parent durable: keyholed may have just created it, and
    /// a crash before that entry reached the disk would take the whole store with it. A parent this
    /// process may not read (EACCES) is left alone: the directory was made there by someone else.
    private static func syncEntry(of stateDirectory: String, configuration: Configuration) throws(StoreError) {
        let trimmed = stateDirectory.reversed().drop { $0 == "/" }.reversed()
        let parent = if let slash = trimmed.lastIndex(of: "/") {
            slash == trimmed.startIndex ? "/" : String(trimmed[..<slash])
        } else {
            trimmed.isEmpty ? "/" : "."
        }
        guard configuration.syncDirectory(parent) || errno == EACCES else {
            throw .io("cannot sync \(parent): \(WALDirectory.error())")
        }
    }
}
