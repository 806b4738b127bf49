extension Store {
    /// What start-up found and did.
    public struct OpenReport: Sendable {
        /// Records replayed from the log.
        public var replayed = 0
        /// Sessions dropped because they had expired.
        public var expired = 0
        /// Torn tails dropped, `--repair`'s cuts: one line each, for the log.
        public var warnings: [String] = []
        /// Records `--repair` cut.
        public var lostRecords = 0
        /// Where `--repair` kept what it cut.
        public var cutDirectory: String?
    }

    /// Opens the store in `stateDirectory` (which must exist): locks it, recovers the log (WAL.md,
    /// "Reading and recovery"), replays it and drops expired sessions. The committer starts with
    /// `startCommitter`.
    ///
    /// - Parameter repair: cut the log at the first corruption instead of refusing to start, keeping a
    ///   copy of what was cut.
    /// - Throws: `StoreError.locked` when another process holds the directory, `.corrupt` naming the
    ///   file and offset, `.io`.
    public static func open(
        stateDirectory: String, configuration: Configuration = Configuration(), repair: Bool = false, now: Int64
    ) throws(StoreError) -> (Store, OpenReport) {
        let lock = try StateDirectoryLock(stateDirectory: stateDirectory)
        let directory = WALDirectory(stateDirectory: stateDirectory)
        try directory.create()
        let segments = try directory.readSegments()
        let plan = try WALRecovery.plan(segments: segments, snapshotLSN: 0, repair: repair) { record in
            StoreRecord(record) == nil ? "a record of type 0x\(String(record.type, radix: 16)) that does not parse" : nil
        }
        var report = OpenReport(warnings: plan.warnings, lostRecords: plan.lostRecords)
        if plan.repaired {
            report.cutDirectory = try directory.preserveCut(of: plan, segments: segments, now: now)
        }
        try directory.apply(plan)

        var tables = StoreTables()
        for entry in plan.entries {
            // The plan validated every record: each decodes.
            guard let record = StoreRecord(entry.record) else { continue }
            tables.apply(record)
        }
        report.replayed = plan.entries.count
        var cursor = 0
        repeat {
            let (removed, next) = tables.sweep(now: now, from: cursor, limit: 1 << 20)
            report.expired += removed
            cursor = next
        } while cursor != 0

        var writerConfiguration = WALWriter.Configuration()
        writerConfiguration.segmentBytes = configuration.segmentBytes
        let writer = try WALWriter(directory: directory, plan: plan, configuration: writerConfiguration)
        let walBytes = segments.filter { !plan.remove.contains($0.sequence) }.reduce(0) { $0 + $1.bytes.count }
        let store = Store(
            configuration: configuration, tables: tables, writer: writer, lock: lock, walBytes: walBytes)
        return (store, report)
    }
}
