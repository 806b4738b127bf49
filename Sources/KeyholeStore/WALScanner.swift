/// Reads one segment's bytes by WAL.md's rules, without I/O: its records, and how it ends.
public enum WALScanner {
    /// What reading one segment found.
    public struct Scan: Sendable, Equatable {
        /// How the segment ends.
        public enum Ending: Sendable, Equatable {
            /// Every byte belongs to a valid record.
            case clean
            /// A torn write at `offset` (last segment only): truncate there; offset 0 means the header
            /// itself is torn and the file goes.
            case torn(offset: Int)
            /// The records end at `offset` and only zeros follow (last segment only): space the writer
            /// filled ahead, the normal end of the log.
            case zeroFilled(offset: Int)
            /// Corruption at `offset`, for the reason given.
            case corrupt(offset: Int, reason: String)
        }

        /// The header, when it is valid.
        public var header: WALSegmentHeader?
        /// The valid records, in order; the first has the header's first LSN (empty unless kept).
        public var records: [WALRecord]
        /// Where each record starts (empty unless kept).
        public var offsets: [Int]
        /// How many valid records there are.
        public var count = 0
        /// How the segment ends.
        public var ending: Ending
    }

    /// Scans segment `sequence`; `isLast` allows a torn tail. `validate` says why a record whose CRC
    /// matches still cannot be used (an unknown type, a payload that does not parse): corruption.
    /// `keep` keeps the records and their offsets in the scan (start-up only counts them).
    public static func scan(
        _ bytes: [UInt8], sequence: UInt64, isLast: Bool, keep: Bool = true, validate: (WALRecord) -> String? = { _ in nil }
    ) -> Scan {
        scan(bytes, sequence: sequence, isLast: isLast, keep: keep, check: { _, record in validate(record) }, commit: {})
    }

    /// Scans segment `sequence`, format 1 or 2. `check` is called with each record (and its LSN) of a
    /// batch whose records are all intact, before the batch counts, and says why one cannot be used
    /// (corruption at the batch); `commit` then says the records checked since the last `commit` are
    /// the log's. A format-1 record is a batch of its own.
    static func scan(
        _ bytes: [UInt8], sequence: UInt64, isLast: Bool, keep: Bool,
        check: (UInt64, WALRecord) -> String?, commit: () -> Void
    ) -> Scan {
        var scan = Scan(header: nil, records: [], offsets: [], ending: .clean)
        guard bytes.count >= WALSegmentHeader.size, !bytes.allSatisfy({ $0 == 0 }) else {
            scan.ending = isLast ? .torn(offset: 0) : .corrupt(offset: 0, reason: "the segment header is missing")
            return scan
        }
        guard let header = WALSegmentHeader(bytes) else {
            scan.ending = .corrupt(offset: 0, reason: "the segment header is damaged")
            return scan
        }
        guard header.sequence == sequence else {
            scan.ending = .corrupt(offset: 0, reason: "the header names segment \(header.sequence)")
            return scan
        }
        scan.header = header
        if header.format == 1 {
            scanRecords(bytes, from: header.firstLSN, isLast: isLast, keep: keep, check: check, commit: commit, into: &scan)
        } else {
            scanBatches(bytes, from: header.firstLSN, isLast: isLast, keep: keep, check: check, commit: commit, into: &scan)
        }
        return scan
    }

    /// Format 1: records back to back, each its own batch.
    private static func scanRecords(
        _ bytes: [UInt8], from firstLSN: UInt64, isLast: Bool, keep: Bool,
        check: (UInt64, WALRecord) -> String?, commit: () -> Void, into scan: inout Scan
    ) {
        var offset = WALSegmentHeader.size
        var lsn = firstLSN
        while offset < bytes.count {
            switch record(in: bytes, at: offset, lsn: lsn) {
            case .valid(let record, let next):
                // A header naming a first LSN near 2^64 (its CRC matching all the same) must not make
                // the count below trap: keyholed would die at start-up, --repair too, instead of
                // reporting the damage (found by keyhole-fuzz). LSNs start at 1: no log gets this far.
                guard lsn < .max else {
                    scan.ending = .corrupt(offset: offset, reason: "a record past the last LSN there can be")
                    return
                }
                if let reason = check(lsn, record) {
                    scan.ending = .corrupt(offset: offset, reason: reason)
                    return
                }
                commit()
                if keep {
                    scan.records.append(record)
                    scan.offsets.append(offset)
                }
                scan.count += 1
                offset = next
                lsn += 1
            case .invalid(let reason, let tornIfLast):
                // A torn write leaves nothing valid after it; anything else is damage to keep.
                if isLast && isZero(bytes, from: offset) {
                    scan.ending = .zeroFilled(offset: offset)
                } else if isLast && tornIfLast && !validRecordFollows(bytes, after: offset, lsn: lsn) {
                    scan.ending = .torn(offset: offset)
                } else {
                    scan.ending = .corrupt(offset: offset, reason: reason)
                }
                return
            }
        }
    }

    enum Read {
        case valid(WALRecord, next: Int)
        /// Why it is not a record, and whether a crash during its append could explain it.
        case invalid(String, tornIfLast: Bool)
    }

    /// The record at `offset`, as LSN `lsn`, within `bytes[..<limit]` (the file, or its batch).
    static func record(in bytes: [UInt8], at offset: Int, lsn: UInt64, limit: Int? = nil) -> Read {
        let limit = limit ?? bytes.count
        let remaining = limit - offset
        guard remaining >= WALRecord.headerBytes else {
            return .invalid("a record header is cut short", tornIfLast: true)
        }
        let length = Int(bytes.bigEndianUInt32(at: offset))
        guard length >= 1, length <= WALRecord.maximumBodyBytes else {
            // A zero length inside the zero-filled space: an append whose first page never reached
            // the disk while a later one did.
            return .invalid("a record length of \(length) is invalid", tornIfLast: length == 0)
        }
        let end = offset + WALRecord.headerBytes + length
        guard end <= limit else {
            return .invalid("a record runs past the end of \(limit == bytes.count ? "the file" : "its batch")", tornIfLast: true)
        }
        let body = bytes[(offset + WALRecord.headerBytes)..<end]
        var crc = CRC32C()
        crc.update(bigEndian: lsn)
        crc.update(body)
        guard crc.value == bytes.bigEndianUInt32(at: offset + 4) else {
            // Torn when the append that wrote it was the last: only zeros (or nothing) after it.
            return .invalid("a record's CRC does not match", tornIfLast: isZero(bytes, from: end))
        }
        return .valid(WALRecord(type: body.first!, payload: Array(body.dropFirst())), next: end)
    }

    /// Whether every byte from `offset` on is zero (only on the failure paths: a whole tail is read).
    static func isZero(_ bytes: [UInt8], from offset: Int) -> Bool {
        bytes.withUnsafeBytes { raw in
            var index = offset
            // Eight bytes at a time: the tail can be the writer's zero-filled space, 128 KiB.
            while index + 8 <= raw.count {
                guard raw.loadUnaligned(fromByteOffset: index, as: UInt64.self) == 0 else { return false }
                index += 8
            }
            while index < raw.count {
                guard raw[index] == 0 else { return false }
                index += 1
            }
            return true
        }
    }

    /// Whether a valid record (as LSN `lsn` or `lsn + 1`) starts anywhere after `offset`: then the bad
    /// bytes at `offset` are not a torn tail but damage in the middle, and truncating would drop records.
    static func validRecordFollows(_ bytes: [UInt8], after offset: Int, lsn: UInt64) -> Bool {
        var start = offset + 1
        while start + WALRecord.headerBytes < bytes.count {
            let length = Int(bytes.bigEndianUInt32(at: start))
            let end = start + WALRecord.headerBytes + length
            if length >= 1, end <= bytes.count {
                let expected = bytes.bigEndianUInt32(at: start + 4)
                for candidate in lsn < .max ? [lsn, lsn + 1] : [lsn] {
                    var crc = CRC32C()
                    crc.update(bigEndian: candidate)
                    crc.update(bytes[(start + WALRecord.headerBytes)..<end])
                    if crc.value == expected { return true }
                }
            }
            start += 1
        }
        return false
    }
}
