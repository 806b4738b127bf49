import KeyholeStore
import Testing

/// The end of the log: a torn last write, in batches (format 2) and in records (format 1), and a log of
/// format 1 that a keyholed writing format 2 goes on with.
@Suite("WAL recovery of a torn last write")
struct WALBatchRecoveryTests {
    typealias Base = WALRecoveryTests

    /// Segment 2 holding records 11 to 20 in batches of 3, then one batch of records 21 to 60 that is
    /// several pages long, starting mid-page, then the writer's zeros; where that batch starts.
    static func lastBatch() -> (segment: WALRecovery.Segment, start: Int, end: Int) {
        var segment = Base.segment(2, 11...20)
        let start = segment.bytes.count
        var body: [UInt8] = []
        for lsn in 21...60 {
            // Records of 300 bytes or so: 40 of them take three pages and more.
            WALRecord(type: 1, payload: [UInt8](repeating: UInt8(lsn), count: 280 + lsn)).append(lsn: UInt64(lsn), to: &body)
        }
        segment.bytes += WALBatchHeader(firstLSN: 21, length: UInt64(body.count)).encoded + body
        let end = segment.bytes.count
        segment.bytes += [UInt8](repeating: 0, count: 65536 - end % 65536 + 65536)
        return (segment, start, end)
    }

    static let page = 4096

    /// Byte ranges of the last batch that never reached the disk, as a power cut can leave them (pages,
    /// or sectors, written in any order): the rest of it did.
    static let losses: [String: @Sendable (Int, Int) -> Range<Int>] = [
        "its first 4 KiB": { start, _ in start..<(start + 4096) },
        "the page holding its start": { start, _ in start..<((start / page + 1) * page) },
        "a page in its middle": { start, _ in ((start / page + 1) * page)..<((start / page + 2) * page) },
        "all but its last page": { start, end in start..<((end - 1) / page * page) },
        "its header's sector": { start, _ in start..<((start / 512 + 1) * 512) },
        "its last page": { _, end in ((end - 1) / page * page)..<end },
        "a sector in its middle": { start, _ in (start + 2048)..<(start + 2560) },
    ]

    @Test("a power cut inside a multi-page last batch: it is cut whole, whichever of its sectors reached the disk",
        arguments: losses.keys.sorted())
    func tornBatch(lost: String) throws {
        var (last, start, end) = Self.lastBatch()
        #expect(end - start > 3 * Self.page)
        for index in Self.losses[lost]!(start, end) { last.bytes[index] = 0 }
        let plan = try WALRecovery.plan(segments: [Base.segment(1, 1...10), last], snapshotLSN: 0)
        #expect(Base.lsns(plan) == (1...20).map(UInt64.init))
        #expect(plan.lastLSN == 20)
        #expect(plan.truncate?.sequence == 2 && plan.truncate?.offset == start)
        #expect(plan.appendTo?.sequence == 2 && plan.appendTo?.size == start)
        #expect(plan.warnings.count == 1 && plan.warnings[0].contains("torn write at offset \(start)"), "\(plan.warnings)")
        #expect(!plan.repaired && plan.lostRecords == 0)
    }

    @Test("the same damage with a batch after it is mid-log corruption: refused, naming the batch", arguments: losses.keys.sorted())
    func damagedBatchNotLast(lost: String) throws {
        var (last, start, end) = Self.lastBatch()
        // The batch after it: written once the damaged one was synced (so that one was acknowledged).
        var next: [UInt8] = []
        Base.record(61).append(lsn: 61, to: &next)
        last.bytes.replaceSubrange(end..<(end + WALBatchHeader.size + next.count),
            with: WALBatchHeader(firstLSN: 61, length: UInt64(next.count)).encoded + next)
        #expect(try WALRecovery.plan(segments: [Base.segment(1, 1...10), last], snapshotLSN: 0).lastLSN == 61)
        for index in Self.losses[lost]!(start, end) { last.bytes[index] = 0 }
        do {
            _ = try WALRecovery.plan(segments: [Base.segment(1, 1...10), last], snapshotLSN: 0)
            Issue.record("damage before a later batch was cut as torn")
        } catch {
            #expect(error.isCorruption && error.message.contains("\(last.path) is corrupt at offset \(start):"), "\(error.message)")
        }
        // And in a segment that is not the last, even without a batch after it.
        var (notLast, _, _) = Self.lastBatch()
        for index in Self.losses[lost]!(start, end) { notLast.bytes[index] = 0 }
        notLast.bytes.removeSubrange(end...)
        #expect(throws: StoreError.corrupt(file: "", offset: 0, "")) {
            try WALRecovery.plan(segments: [Base.segment(1, 1...10), notLast, Base.segment(3, 61...62)], snapshotLSN: 0)
        }
    }

    @Test("a batch's records are kept whole or not at all: an unusable record drops its batch's earlier ones too")
    func batchWhole() throws {
        let (last, start, _) = Self.lastBatch()
        var applied: [UInt64] = []
        let files: [(sequence: UInt64, path: String)] = [(1, "wal/1"), (2, "wal/2")]
        let contents = [Base.segment(1, 1...10).bytes, last.bytes]
        let parse: (UInt64, WALRecord) -> Result<UInt64, WALRecovery.Unusable> = { lsn, _ in
            lsn == 40 ? .failure(WALRecovery.Unusable("record 40 is of no use")) : .success(lsn)
        }
        do {
            _ = try WALRecovery.plan(
                files: files, read: { index throws(StoreError) in contents[index] }, snapshotLSN: 0, parse: parse,
                apply: { lsn, _ in applied.append(lsn) })
            Issue.record("an unusable record was accepted")
        } catch {
            #expect(error.message.contains("wal/2 is corrupt at offset \(start): record 40 is of no use"), "\(error.message)")
        }
        #expect(applied == (1...20).map(UInt64.init))
        applied = []
        let plan = try WALRecovery.plan(
            files: files, read: { index throws(StoreError) in contents[index] }, snapshotLSN: 0, repair: true, parse: parse,
            apply: { lsn, _ in applied.append(lsn) })
        #expect(applied == (1...20).map(UInt64.init))
        #expect(plan.replayed == 20 && plan.lastLSN == 20 && plan.lostRecords == 40)
        #expect(plan.truncate?.sequence == 2 && plan.truncate?.offset == start)
        // The form keyhole-fuzz uses, `accept`, sees the batch's records up to the unusable one, and
        // plans the same.
        var accepted: [UInt64] = []
        let acceptPlan = try WALRecovery.plan(
            files: files, read: { index throws(StoreError) in contents[index] }, snapshotLSN: 0, repair: true
        ) { lsn, _ in
            accepted.append(lsn)
            return lsn == 40 ? "record 40 is of no use" : nil
        }
        #expect(accepted == (1...40).map(UInt64.init))
        #expect(acceptPlan.replayed == 20 && acceptPlan.lastLSN == 20 && acceptPlan.truncate?.offset == start)
    }

    @Test("format 1: a torn write at the end of the last segment is cut off, with a warning", arguments: [
        "half a record header", "a record cut short", "a last record with a bad CRC", "a record with a bad CRC, then zeros",
        "a record whose first bytes never reached the disk, in zeros", "only part of the header of a new segment",
    ])
    func tornRecord(kind: String) throws {
        var last = Base.segment(2, 11...20, format: 1)
        let intact = last.bytes.count
        var tail: [UInt8] = []
        Base.record(21).append(lsn: 21, to: &tail)
        switch kind {
        case "half a record header": last.bytes += tail.prefix(5)
        case "a record cut short": last.bytes += tail.dropLast(3)
        case "a last record with a bad CRC":
            tail[tail.count - 1] ^= 0xFF
            last.bytes += tail
        case "a record whose first bytes never reached the disk, in zeros":
            for index in 0..<WALRecord.headerBytes { tail[index] = 0 }
            last.bytes += tail + [UInt8](repeating: 0, count: 4096)
        case "a record with a bad CRC, then zeros":
            // Appended over the writer's zeros, and only its first part reached the disk.
            for index in (tail.count / 2)..<tail.count { tail[index] = 0 }
            last.bytes += tail + [UInt8](repeating: 0, count: 4096)
        default:
            last = WALRecovery.Segment(sequence: 3, path: "wal/3", bytes: Array(WALSegmentHeader(sequence: 3, firstLSN: 21).encoded.prefix(20)))
        }
        let first = Base.segment(1, 1...10, format: 1)
        let segments = kind.hasPrefix("only") ? [first, Base.segment(2, 11...20, format: 1), last] : [first, last]
        let plan = try WALRecovery.plan(segments: segments, snapshotLSN: 0)
        #expect(plan.lastLSN == 20)
        #expect(Base.lsns(plan) == (1...20).map(UInt64.init))
        if kind.hasPrefix("only") {
            #expect(plan.remove == [3])
        } else {
            #expect(plan.truncate?.sequence == 2 && plan.truncate?.offset == intact)
        }
        // Appends go to a new segment of format 2 after segment 2.
        #expect(plan.appendTo == nil && plan.lastKeptSequence == 2)
        #expect(plan.warnings.count == 1)
    }

    @Test("a log of format 1 is read as it was; appends go to a new segment, the last format-1 one trimmed of its zeros")
    func formatOneLog() throws {
        var last = Base.segment(2, 11...20, format: 1)
        let records = last.bytes.count
        last.bytes += [UInt8](repeating: 0, count: 65536)
        let plan = try WALRecovery.plan(segments: [Base.segment(1, 1...10, format: 1), last], snapshotLSN: 0)
        #expect(Base.lsns(plan) == (1...20).map(UInt64.init) && plan.entries.allSatisfy { $0.record == Base.record(Int($0.lsn)) })
        #expect(plan.appendTo == nil && plan.lastKeptSequence == 2 && plan.lastLSN == 20)
        #expect(plan.truncate?.sequence == 2 && plan.truncate?.offset == records)
        #expect(plan.warnings.isEmpty && plan.keptBytes == Base.segment(1, 1...10, format: 1).bytes.count + records)
        // Once a segment of format 2 follows, appends go on in it.
        let mixed = try WALRecovery.plan(
            segments: [Base.segment(1, 1...10, format: 1), Base.segment(2, 11...20, format: 1), Base.segment(3, 21...30)], snapshotLSN: 0)
        #expect(Base.lsns(mixed) == (1...30).map(UInt64.init))
        #expect(mixed.appendTo?.sequence == 3 && mixed.truncate == nil)
    }
}
