extension WALScanner {
    /// A batch read whole, or why not.
    enum BatchRead {
        /// Every record in it is intact (in `records`); the next batch starts at `end`.
        case valid(end: Int)
        /// Not a whole batch, for the reason given: torn, if it is the last write, else damage.
        case invalid(String)
        /// A record at the offset given would take the LSN past 2^64 - 1: damage, never a torn write.
        case pastLastLSN(Int)
    }

    /// Format 2: batches, each a `WALBatchHeader` and the records it holds (WAL.md, "Batches"). A batch
    /// counts whole or not at all: none of its records is checked, kept or committed unless every one
    /// of them is intact.
    static func scanBatches(
        _ bytes: [UInt8], from firstLSN: UInt64, isLast: Bool, keep: Bool,
        check: (UInt64, WALRecord) -> String?, commit: () -> Void, into scan: inout Scan
    ) {
        var offset = WALSegmentHeader.size
        var lsn = firstLSN
        var records: [(offset: Int, record: WALRecord)] = []
        while offset < bytes.count {
            let next: Int
            switch batch(in: bytes, at: offset, lsn: lsn, into: &records) {
            case .valid(let end):
                next = end
            case .pastLastLSN(let record):
                scan.ending = .corrupt(offset: offset, reason: "a record past the last LSN there can be, at offset \(record)")
                return
            case .invalid(let reason):
                if isLast && isZero(bytes, from: offset) {
                    scan.ending = .zeroFilled(offset: offset)
                } else if isLast && !batchFollows(bytes, after: offset, lsn: lsn) {
                    // The last write, cut short by a crash before its sync returned (so none of its
                    // changes was acknowledged), whichever of its sectors reached the disk.
                    scan.ending = .torn(offset: offset)
                } else {
                    scan.ending = .corrupt(offset: offset, reason: reason)
                }
                return
            }
            for (index, entry) in records.enumerated() {
                if let reason = check(lsn + UInt64(index), entry.record) {
                    scan.ending = .corrupt(offset: offset, reason: "\(reason), at offset \(entry.offset)")
                    return
                }
            }
            commit()
            if keep {
                for entry in records {
                    scan.records.append(entry.record)
                    scan.offsets.append(entry.offset)
                }
            }
            scan.count += records.count
            lsn += UInt64(records.count)
            offset = next
        }
    }

    /// The batch at `offset`, whose first record must be LSN `lsn`; its records go to `records`.
    static func batch(in bytes: [UInt8], at offset: Int, lsn: UInt64, into records: inout [(offset: Int, record: WALRecord)]) -> BatchRead {
        records.removeAll(keepingCapacity: true)
        guard bytes.count - offset >= WALBatchHeader.size else { return .invalid("a batch header is cut short") }
        guard let header = WALBatchHeader(bytes, at: offset) else { return .invalid("a batch header is damaged") }
        guard header.firstLSN == lsn else { return .invalid("a batch of LSN \(header.firstLSN) where LSN \(lsn) is due") }
        let start = offset + WALBatchHeader.size
        guard header.length <= UInt64(bytes.count - start) else { return .invalid("a batch runs past the end of the file") }
        let end = start + Int(header.length)
        var position = start
        var recordLSN = lsn
        while position < end {
            switch record(in: bytes, at: position, lsn: recordLSN, limit: end) {
            case .valid(let record, let next):
                // See `scanRecords`: a first LSN near 2^64 must be reported, not trap.
                guard recordLSN < .max else { return .pastLastLSN(position) }
                records.append((position, record))
                position = next
                recordLSN += 1
            case .invalid(let reason, _):
                return .invalid("\(reason), at offset \(position)")
            }
        }
        return .valid(end: end)
    }

    /// Whether a batch header for LSN `lsn` or a later one starts anywhere after `offset`: then the bad
    /// batch at `offset` was not the last write but is damage in the middle of the log, and cutting
    /// there would drop batches that were acknowledged. Only an LSN the bytes in between could have
    /// led up to counts (each record takes at least 9 bytes), so that the payload of a record in a
    /// torn batch is hard to mistake for a batch header.
    static func batchFollows(_ bytes: [UInt8], after offset: Int, lsn: UInt64) -> Bool {
        var start = offset + 1
        while start + WALBatchHeader.size <= bytes.count {
            if bytes[start] == WALBatchHeader.marker[0], let header = WALBatchHeader(bytes, at: start), header.firstLSN >= lsn,
                header.firstLSN - lsn <= UInt64((start - offset) / WALBatchHeader.minimumLength)
            {
                return true
            }
            start += 1
        }
        return false
    }
}
