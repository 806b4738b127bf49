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

    /// The outcome.
    public struct Plan: Sendable {
        /// The records after the snapshot, in order.
        public var entries: [Entry] = []
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
        /// What was dropped, for the warning: torn bytes, or the records `--repair` cut.
        public var warnings: [String] = []
        /// Records lost to `--repair` (those it could still count).
        public var lostRecords = 0
        /// Whether `--repair` cut the log (rather than only a torn tail being dropped).
        public var repaired = false

    }

    /// Plans recovery of `segments` (any order) after a snapshot that covers LSNs up to `snapshotLSN`.
    ///
    /// - Parameter repair: cut the log at the first corruption instead of refusing to start.
    /// - Throws: `StoreError.corrupt` naming the file and offset (unless `repair`).
    /// - Parameter validate: why a record with a good CRC cannot be used (see `WALScanner.scan`). It is
    ///   called for the records of each segment planned, in log order, and for no other: the plan's
    ///   `entries` are the last of the records it accepted.
    public static func plan(
        segments: [Segment], snapshotLSN: UInt64, repair: Bool = false, validate: (WALRecord) -> String? = { _ in nil }
    ) throws(StoreError) -> Plan {
        var plan = try planWithoutSequence(segments: segments, snapshotLSN: snapshotLSN, repair: repair, validate: validate)
        plan.lastKeptSequence = segments.map(\.sequence).filter { !plan.remove.contains($0) }.max() ?? 0
        return plan
    }

    private static func planWithoutSequence(
        segments: [Segment], snapshotLSN: UInt64, repair: Bool, validate: (WALRecord) -> String?
    ) throws(StoreError) -> Plan {
        var plan = Plan(lastLSN: snapshotLSN)
        let sorted = segments.sorted { $0.sequence < $1.sequence }
        var expectedLSN: UInt64?
        for (index, segment) in sorted.enumerated() {
            let isLast = index == sorted.count - 1
            if index > 0, segment.sequence != sorted[index - 1].sequence + 1 {
                let missing = WALSegmentHeader.fileName(sorted[index - 1].sequence + 1)
                try fail(&plan, sorted, from: index, offset: 0, repair: repair, path: segment.path,
                    reason: "segment \(missing) before it is missing")
                return plan
            }
            // The first segment may start anywhere up to just after the snapshot; later ones must
            // continue exactly where the one before ended. Checked before the scan, so that `validate`
            // sees exactly the records of the segments planned (callers rely on that).
            if let header = WALSegmentHeader(segment.bytes), header.sequence == segment.sequence {
                let continues = expectedLSN.map { header.firstLSN == $0 } ?? (header.firstLSN <= snapshotLSN + 1)
                guard continues else {
                    try fail(&plan, sorted, from: index, offset: 0, repair: repair, path: segment.path,
                        reason: "its first LSN \(header.firstLSN) does not follow LSN \((expectedLSN ?? snapshotLSN + 1) - 1)")
                    return plan
                }
            }
            let scan = WALScanner.scan(segment.bytes, sequence: segment.sequence, isLast: isLast, validate: validate)
            if let header = scan.header {
                for (position, record) in scan.records.enumerated() {
                    let lsn = header.firstLSN + UInt64(position)
                    if lsn > snapshotLSN { plan.entries.append(Entry(lsn: lsn, record: record)) }
                    plan.lastLSN = max(plan.lastLSN, lsn)
                }
                expectedLSN = header.firstLSN + UInt64(scan.records.count)
            }
            switch scan.ending {
            case .clean:
                if isLast { plan.appendTo = (segment.sequence, segment.bytes.count) }
            case .torn(let offset):
                if offset == 0 {
                    // The segment being created when keyholed stopped: appends go on in the one before.
                    plan.remove.append(segment.sequence)
                    if index > 0 { plan.appendTo = (sorted[index - 1].sequence, sorted[index - 1].bytes.count) }
                } else {
                    plan.truncate = (segment.sequence, offset)
                    plan.appendTo = (segment.sequence, offset)
                }
                plan.warnings.append("\(segment.path): a torn write at offset \(offset); \(segment.bytes.count - offset) bytes dropped")
            case .corrupt(let offset, let reason):
                // The records before the damage in this segment are kept; the plan cuts at it.
                try fail(&plan, sorted, from: index, offset: offset, repair: repair, path: segment.path, reason: reason)
                if offset > 0 { plan.appendTo = (segment.sequence, offset) }
                return plan
            }
        }
        return plan
    }

    /// Corruption in `segments[index]` at `offset`: an error, or with `repair`, a cut there that drops
    /// the rest of that segment and every later one.
    private static func fail(
        _ plan: inout Plan, _ segments: [Segment], from index: Int, offset: Int, repair: Bool, path: String, reason: String
    ) throws(StoreError) {
        guard repair else { throw StoreError.corrupt(file: path, offset: offset, reason) }
        plan.repaired = true
        if offset > 0 {
            plan.truncate = (segments[index].sequence, offset)
        } else {
            plan.remove.append(segments[index].sequence)
        }
        plan.remove += segments[(index + 1)...].map(\.sequence)
        // What can still be counted: whole records after the cut in this segment and the later ones.
        var lost = 0
        for (position, segment) in segments[index...].enumerated() {
            let start = position == 0 ? offset : 0
            lost += countRecords(segment.bytes, from: max(start, WALSegmentHeader.size))
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
