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
            snapshotLSN: snapshotLSN, repair: repair
        ) { lsn, record in
            if lsn > snapshotLSN { entries.append(Entry(lsn: lsn, record: record)) }
            return nil
        }
        plan.entries = entries
        return plan
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
    /// - Parameter accept: called with each record whose CRC matches, in log order, for the segments
    ///   planned and no other (each segment's LSN continuity is checked before it is scanned). It says
    ///   why a record cannot be used (an unknown type, a payload that does not parse: corruption), or
    ///   `nil`. The records it accepted before any corruption are the ones the plan keeps, so a caller
    ///   may apply those after `snapshotLSN` as they come.
    /// - Throws: `StoreError.corrupt` naming the file and offset (unless `repair`), or `read`'s error.
    public static func plan(
        files: [(sequence: UInt64, path: String)], read: (Int) throws(StoreError) -> [UInt8],
        readHeader: ((Int) throws(StoreError) -> [UInt8])? = nil, snapshotLSN: UInt64,
        repair: Bool = false, accept: (UInt64, WALRecord) -> String?
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
            repair: repair, accept: accept)
        plan.lastKeptSequence = files.map(\.sequence).filter { !plan.remove.contains($0) }.max() ?? 0
        if let append = plan.appendTo, let logEnd, logEnd.nextLSN <= snapshotLSN {
            // The log ends before the snapshot's start (its tail lost or cut): the next record is the
            // snapshot's start, which the end of this segment does not imply. It goes to a new segment
            // whose header says so; this one, no longer the last, gives back its zeros.
            if logEnd.fileSize > append.size { plan.truncate = (append.sequence, append.size) }
            plan.appendTo = nil
            plan.warnings.append(
                "\(logEnd.path): the log ends at LSN \(logEnd.nextLSN - 1), before the snapshot's start \(snapshotLSN + 1); "
                    + "appends go to a new segment starting there")
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

    /// Where the log read ends: the segment appends would continue in, its size on disk, and the LSN
    /// its next record would have.
    private struct LogEnd {
        var path: String
        var fileSize: Int
        var nextLSN: UInt64
    }

    /// Plans `files`, the segments from the first one needed; returns where the log kept ends (`nil`
    /// when no segment with a valid header is kept).
    private static func planSegments(
        _ plan: inout Plan, files: [(sequence: UInt64, path: String)], read: (Int) throws(StoreError) -> [UInt8],
        snapshotLSN: UInt64, repair: Bool, accept: (UInt64, WALRecord) -> String?
    ) throws(StoreError) -> LogEnd? {
        var expectedLSN: UInt64?
        var previousSize = 0
        var logEnd: LogEnd?
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
            // continue exactly where the one before ended. Checked before the scan, so that `accept`
            // sees exactly the records of the segments planned (callers rely on that).
            if let header, header.sequence == file.sequence {
                let continues = expectedLSN.map { header.firstLSN == $0 } ?? (header.firstLSN <= snapshotLSN + 1)
                guard continues else {
                    try fail(&plan, files, read, from: index, bytes: bytes, offset: 0, repair: repair, path: file.path,
                        reason: "its first LSN \(header.firstLSN) does not follow LSN \((expectedLSN ?? snapshotLSN + 1) - 1)")
                    return logEnd
                }
            }
            var lsn = header?.firstLSN ?? 0
            let scan = WALScanner.scan(bytes, sequence: file.sequence, isLast: isLast, keep: false) { record in
                defer { lsn += 1 }
                if let reason = accept(lsn, record) { return reason }
                if lsn > snapshotLSN { plan.replayed += 1 }
                return nil
            }
            if let header = scan.header {
                let count = UInt64(scan.count)
                if count > 0 { plan.lastLSN = max(plan.lastLSN, header.firstLSN + count - 1) }
                expectedLSN = header.firstLSN + count
                logEnd = LogEnd(path: file.path, fileSize: bytes.count, nextLSN: header.firstLSN + count)
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

    /// Corruption in `files[index]` (whose `bytes`, when read) at `offset`: an error, or with
    /// `repair`, a cut there that drops the rest of that segment and every later one.
    private static func fail(
        _ plan: inout Plan, _ files: [(sequence: UInt64, path: String)], _ read: (Int) throws(StoreError) -> [UInt8],
        from index: Int, bytes: [UInt8]?, offset: Int, repair: Bool, path: String, reason: String
    ) throws(StoreError) {
        guard repair else { throw StoreError.corrupt(file: path, offset: offset, reason) }
        plan.repaired = true
        if offset > 0 {
            plan.truncate = (files[index].sequence, offset)
        } else {
            plan.remove.append(files[index].sequence)
        }
        plan.remove += files[(index + 1)...].map(\.sequence)
        // What can still be counted: whole records after the cut in this segment and the later ones.
        var lost = 0
        for position in index..<files.count {
            let segment: [UInt8]
            if position == index, let bytes { segment = bytes } else { segment = try read(position) }
            let start = position == index ? offset : 0
            lost += countRecords(segment, from: max(start, WALSegmentHeader.size))
        }
        plan.lostRecords = lost
        plan.warnings.append("\(path): cut at offset \(offset) (\(reason)); \(lost) records lost")
    }

    /// Records that still parse (length and bounds, CRC not checked: the LSNs are unknown) from `offset`.
    private static func countRecords(_ bytes: [UInt8], from offset: Int) -> Int {
        var offset = offset
        var count = 0
        while offset + WALRecord.headerBytes <= bytes.count {
            let length = Int(bytes.bigEndianUInt32(at: offset))
            guard length >= 1, length <= WALRecord.maximumBodyBytes, offset + WALRecord.headerBytes + length <= bytes.count
            else { break }
            count += 1
            offset += WALRecord.headerBytes + length
        }
        return count
    }
}
