/// What to do with the log at start-up, decided from the segments' bytes without I/O (WAL.md,
/// "Reading and recovery"): which records to replay, what to truncate or remove, or why not to start.
public enum WALRecovery {
    /// A segment file as read.
    public struct Segment: Sendable {
        /// Its sequence number (from its name).
        public var sequence: UInt64
        /// Its path, for messages.
        public var path: String
        /// Its bytes.
        public var bytes: [UInt8]

        /// A segment.
        public init(sequence: UInt64, path: String, bytes: [UInt8]) {
            self.sequence = sequence
            self.path = path
            self.bytes = bytes
        }
    }

    /// A record to replay.
    public struct Entry: Sendable, Equatable {
        /// Its log sequence number.
        public var lsn: UInt64
        /// The record.
        public var record: WALRecord
    }

    /// What planning found of one segment it read.
    public struct SegmentSummary: Sendable, Equatable {
        /// Its sequence number.
        public var sequence: UInt64
        /// The LSN of its first record, when its header is valid.
        public var firstLSN: UInt64?
        /// Its size as read, without the zeros the writer filled ahead (before any truncation the plan
        /// makes).
        public var size: Int
    }

    /// The outcome.
    public struct Plan: Sendable {
        /// The records after the snapshot, in order: only from `plan(segments:snapshotLSN:repair:)`,
        /// which keeps every record. Start-up passes `accept` and applies records as they come instead.
        public var entries: [Entry] = []
        /// How many records after the snapshot were accepted.
        public var replayed = 0
        /// The last LSN in the log (or the snapshot's, when the log has nothing after it).
        public var lastLSN: UInt64 = 0
        /// A segment to cut at an offset (a torn tail, or `--repair`'s cut).
        public var truncate: (sequence: UInt64, offset: Int)?
        /// Segments to delete (a torn header, or the segments after `--repair`'s cut).
        public var remove: [UInt64] = []
        /// The segment appends continue in, and where it ends; `nil` when a new one must be made.
        public var appendTo: (sequence: UInt64, size: Int)?
        /// The highest sequence number of the segments kept (0 when none is): a new segment gets the next.
        public var lastKeptSequence: UInt64 = 0
        /// Segments holding only records the snapshot covers, in sequence order: not read, and to be
        /// deleted, oldest first (a crash while a snapshot deleted them may have left any of them).
        public var covered: [UInt64] = []
        /// The segments read, in order.
        public var segments: [SegmentSummary] = []
        /// What was dropped, for the warning: torn bytes, or the records `--repair` cut.
        public var warnings: [String] = []
        /// Records lost to `--repair` (those it could still count).
        public var lostRecords = 0
        /// Whether `--repair` cut the log (rather than only a torn tail being dropped).
        public var repaired = false

        /// The bytes of log left once the plan is carried out.
        public var keptBytes: Int {
            var bytes = segments.filter { !remove.contains($0.sequence) }.reduce(0) { $0 + $1.size }
            if let (sequence, offset) = truncate, let segment = segments.first(where: { $0.sequence == sequence }) {
                bytes -= segment.size - offset
            }
            return bytes
        }
    }

    /// A record that cannot be used although its CRC matches (an unknown type, a payload that does not
    /// parse): corruption.
    public struct Unusable: Error, Sendable {
        /// Why, for the message.
        public var reason: String

        /// An unusable record.
        public init(_ reason: String) { self.reason = reason }
    }

    /// Plans recovery of `segments` (any order, in memory) after a snapshot that covers LSNs up to
    /// `snapshotLSN`, keeping the records after it in `entries`.
    ///
    /// - Parameter repair: cut the log at the first corruption instead of refusing to start.
    /// - Throws: `StoreError.corrupt` naming the file and offset (unless `repair`).
    public static func plan(segments: [Segment], snapshotLSN: UInt64, repair: Bool = false) throws(StoreError) -> Plan {
        var entries: [Entry] = []
        let sorted = segments.sorted { $0.sequence < $1.sequence }
        var plan = try plan(
            files: sorted.map { ($0.sequence, $0.path) }, read: { index throws(StoreError) in sorted[index].bytes },
            readHeader: { index throws(StoreError) in Array(sorted[index].bytes.prefix(WALSegmentHeader.size)) },
            snapshotLSN: snapshotLSN, repair: repair,
            parse: { _, record in .success(record) },
            apply: { lsn, record in entries.append(Entry(lsn: lsn, record: record)) })
        plan.entries = entries
        return plan
    }

    /// Plans recovery as `plan(files:read:readHeader:snapshotLSN:repair:parse:apply:)` does, with
    /// `accept` saying why a record cannot be used, or `nil`. It sees every record of a batch before the
    /// batch is kept, and a batch may still be refused after (a later record in it unusable): a caller
    /// that applies records must do so in `apply`, not here.
    public static func plan(
        files: [(sequence: UInt64, path: String)], read: (Int) throws(StoreError) -> [UInt8],
        readHeader: ((Int) throws(StoreError) -> [UInt8])? = nil, snapshotLSN: UInt64,
        repair: Bool = false, accept: (UInt64, WALRecord) -> String?
    ) throws(StoreError) -> Plan {
        try plan(
            files: files, read: read, readHeader: readHeader, snapshotLSN: snapshotLSN, repair: repair,
            parse: { lsn, record in accept(lsn, record).map { .failure(Unusable($0)) } ?? .success(()) },
            apply: { _, _ in })
    }

    /// Plans recovery of the segment `files` (in sequence order), reading one at a time with `read`
    /// (given its index in `files`), after a snapshot that covers LSNs up to `snapshotLSN`.
    ///
    /// Segments wholly before the snapshot's start are not read, only listed in `covered`: those before
    /// the last segment whose header is valid and whose first LSN is at or before the snapshot's start.
    /// Their records are all in the snapshot, so one missing or damaged among them loses nothing.
    ///
    /// - Parameter readHeader: reads the first 32 bytes (or all, if shorter) of `files[index]`, to find
    ///   the segments covered; `nil` reads them with `read`.
    /// - Parameter repair: cut the log at the first corruption instead of refusing to start.
    /// - Parameter parse: called with each record whose CRC matches, in log order, for the segments
    ///   planned and no other (each segment's LSN continuity is checked before it is scanned): the
    ///   record decoded, or why it cannot be used (corruption). Every record of a batch is parsed before
    ///   any of them is applied.
    /// - Parameter apply: called, in log order, with each record after `snapshotLSN` that the plan keeps,
    ///   once its whole batch parsed.
    /// - Throws: `StoreError.corrupt` naming the file and offset (unless `repair`), or `read`'s error.
    public static func plan<Parsed>(
        files: [(sequence: UInt64, path: String)], read: (Int) throws(StoreError) -> [UInt8],
        readHeader: ((Int) throws(StoreError) -> [UInt8])? = nil, snapshotLSN: UInt64, repair: Bool = false,
        parse: (UInt64, WALRecord) -> Result<Parsed, Unusable>, apply: (UInt64, Parsed) -> Void
    ) throws(StoreError) -> Plan {
        var plan = Plan(lastLSN: snapshotLSN)
        let first = if let readHeader {
            try firstNeeded(files, readHeader: readHeader, snapshotLSN: snapshotLSN)
        } else {
            try firstNeeded(files, readHeader: read, snapshotLSN: snapshotLSN)
        }
        plan.covered = files[..<first].map(\.sequence)
        let needed = Array(files[first...])
        let logEnd = try planSegments(
            &plan, files: needed, read: { index throws(StoreError) in try read(first + index) }, snapshotLSN: snapshotLSN,
            repair: repair, parse: parse, apply: apply)
        plan.lastKeptSequence = files.map(\.sequence).filter { !plan.remove.contains($0) }.max() ?? 0
        if let append = plan.appendTo, let logEnd, logEnd.nextLSN <= snapshotLSN || logEnd.format < WALSegmentHeader.format {
            // The log ends before the snapshot's start (its tail lost or cut): the next record is the
            // snapshot's start, which the end of this segment does not imply. Or the segment is of
            // format 1, and appends are written in format 2. Either way they go to a new segment; this
            // one, no longer the last, gives back its zeros.
            if logEnd.fileSize > append.size { plan.truncate = (append.sequence, append.size) }
            plan.appendTo = nil
            if logEnd.nextLSN <= snapshotLSN {
                plan.warnings.append(
                    "\(logEnd.path): the log ends at LSN \(logEnd.nextLSN - 1), before the snapshot's start \(snapshotLSN + 1); "
                        + "appends go to a new segment starting there")
            }
        }
        return plan
    }

    /// The index in `files` of the first segment to read: the last one whose header is valid and whose
    /// first LSN is at or before the snapshot's start (every segment before it holds only earlier
    /// records); 0 when there is none (the first segment is then read, and its checks apply).
    static func firstNeeded(
        _ files: [(sequence: UInt64, path: String)], readHeader: (Int) throws(StoreError) -> [UInt8], snapshotLSN: UInt64
    ) throws(StoreError) -> Int {
        for index in files.indices.reversed() {
            if let header = WALSegmentHeader(try readHeader(index)), header.sequence == files[index].sequence,
                header.firstLSN - 1 <= snapshotLSN
            {
                return index
            }
        }
        return 0
    }

    /// Where the log read ends: the segment appends would continue in, its size on disk and format,
    /// and the LSN its next record would have.
    private struct LogEnd {
        var path: String
        var fileSize: Int
        var format: UInt8
        var nextLSN: UInt64
    }

    /// Plans `files`, the segments from the first one needed; returns where the log kept ends (`nil`
    /// when no segment with a valid header is kept).
    private static func planSegments<Parsed>(
        _ plan: inout Plan, files: [(sequence: UInt64, path: String)], read: (Int) throws(StoreError) -> [UInt8],
        snapshotLSN: UInt64, repair: Bool, parse: (UInt64, WALRecord) -> Result<Parsed, Unusable>, apply: (UInt64, Parsed) -> Void
    ) throws(StoreError) -> LogEnd? {
        var expectedLSN: UInt64?
        var previousSize = 0
        var logEnd: LogEnd?
        /// The records of the batch being read, parsed: applied once the whole batch is.
        var batch: [(lsn: UInt64, parsed: Parsed)] = []
        for (index, file) in files.enumerated() {
            let isLast = index == files.count - 1
            if index > 0, file.sequence != files[index - 1].sequence + 1 {
                let missing = WALSegmentHeader.fileName(files[index - 1].sequence + 1)
                try fail(&plan, files, read, from: index, bytes: nil, offset: 0, repair: repair, path: file.path,
                    reason: "segment \(missing) before it is missing")
                return logEnd
            }
            let bytes = try read(index)
            let header = WALSegmentHeader(bytes)
            plan.segments.append(SegmentSummary(sequence: file.sequence, firstLSN: header?.firstLSN, size: bytes.count))
            // The first segment may start anywhere up to just after the snapshot; later ones must
            // continue exactly where the one before ended. Checked before the scan, so that `parse`
            // sees exactly the records of the segments planned (callers rely on that).
            if let header, header.sequence == file.sequence {
                let continues = expectedLSN.map { header.firstLSN == $0 } ?? (header.firstLSN <= snapshotLSN + 1)
                guard continues else {
                    try fail(&plan, files, read, from: index, bytes: bytes, offset: 0, repair: repair, path: file.path,
                        reason: "its first LSN \(header.firstLSN) does not follow LSN \((expectedLSN ?? snapshotLSN + 1) - 1)")
                    return logEnd
                }
            }
            batch.removeAll(keepingCapacity: true)
            let scan = WALScanner.scan(
                bytes, sequence: file.sequence, isLast: isLast, keep: false,
                check: { lsn, record in
                    switch parse(lsn, record) {
                    case .success(let parsed):
                        batch.append((lsn, parsed))
                        return nil
                    case .failure(let unusable):
                        return unusable.reason
                    }
                },
                commit: {
                    for (lsn, parsed) in batch where lsn > snapshotLSN {
                        apply(lsn, parsed)
                        plan.replayed += 1
                    }
                    batch.removeAll(keepingCapacity: true)
                })
            if let header = scan.header {
                let count = UInt64(scan.count)
                if count > 0 { plan.lastLSN = max(plan.lastLSN, header.firstLSN + count - 1) }
                expectedLSN = header.firstLSN + count
                logEnd = LogEnd(path: file.path, fileSize: bytes.count, format: header.format, nextLSN: header.firstLSN + count)
            }
            switch scan.ending {
            case .clean:
                if isLast { plan.appendTo = (file.sequence, bytes.count) }
            case .zeroFilled(let offset):
                // Appends go on over the zeros; the log's bytes are the records'.
                plan.appendTo = (file.sequence, offset)
                plan.segments[plan.segments.count - 1].size = offset
            case .torn(let offset):
                if offset == 0 {
                    // The segment being created when keyholed stopped: appends go on in the one before.
                    plan.remove.append(file.sequence)
                    if index > 0 { plan.appendTo = (files[index - 1].sequence, previousSize) }
                } else {
                    plan.truncate = (file.sequence, offset)
                    plan.appendTo = (file.sequence, offset)
                }
                plan.warnings.append("\(file.path): a torn write at offset \(offset); \(bytes.count - offset) bytes dropped")
            case .corrupt(let offset, let reason):
                // The records before the damage in this segment are kept; the plan cuts at it.
                try fail(&plan, files, read, from: index, bytes: bytes, offset: offset, repair: repair, path: file.path, reason: reason)
                if offset > 0 { plan.appendTo = (file.sequence, offset) }
                return logEnd
            }
            previousSize = bytes.count
        }
        return logEnd
    }
}
