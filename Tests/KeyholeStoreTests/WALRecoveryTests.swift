import KeyholeStore
import Testing

/// Every way a log can end or break, and what start-up does about it (WAL.md, "Reading and recovery"),
/// in the format written (2: batches) and the one still read (1: records back to back).
@Suite("WAL recovery")
struct WALRecoveryTests {
    static let formats: [UInt8] = [1, 2]

    static func record(_ n: Int) -> WALRecord {
        WALRecord(type: UInt8(1 + n % 5), payload: Array("record \(n)".utf8) + [UInt8](repeating: UInt8(n & 0xFF), count: n % 40))
    }

    /// A segment and where its records are.
    struct Built {
        var segment: WALRecovery.Segment
        /// Where record n starts.
        var records: [Int: Int] = [:]
        /// Where the log is cut when record n is damaged: the record (format 1) or its batch (format 2).
        var cuts: [Int: Int] = [:]
    }

    /// A segment holding records `lsns` (LSN n holds record n); in format 2, in batches of `batch`.
    static func build(_ sequence: UInt64, _ lsns: ClosedRange<Int>, format: UInt8 = WALSegmentHeader.format, batch: Int = 3) -> Built {
        var bytes = WALSegmentHeader(sequence: sequence, firstLSN: UInt64(lsns.lowerBound), format: format).encoded
        var built = Built(segment: WALRecovery.Segment(sequence: sequence, path: "wal/\(WALSegmentHeader.fileName(sequence))", bytes: []))
        if format == 1 {
            for lsn in lsns {
                (built.records[lsn], built.cuts[lsn]) = (bytes.count, bytes.count)
                record(lsn).append(lsn: UInt64(lsn), to: &bytes)
            }
        } else {
            for first in stride(from: lsns.lowerBound, through: lsns.upperBound, by: batch) {
                let start = bytes.count
                var body: [UInt8] = []
                for lsn in first...min(first + batch - 1, lsns.upperBound) {
                    (built.records[lsn], built.cuts[lsn]) = (start + WALBatchHeader.size + body.count, start)
                    record(lsn).append(lsn: UInt64(lsn), to: &body)
                }
                bytes += WALBatchHeader(firstLSN: UInt64(first), length: UInt64(body.count)).encoded + body
            }
        }
        built.segment.bytes = bytes
        return built
    }

    static func segment(_ sequence: UInt64, _ lsns: ClosedRange<Int>, format: UInt8 = WALSegmentHeader.format) -> WALRecovery.Segment {
        build(sequence, lsns, format: format).segment
    }

    static func lsns(_ plan: WALRecovery.Plan) -> [UInt64] { plan.entries.map(\.lsn) }

    @Test("a clean log replays every record after the snapshot, in order, across segments", arguments: formats)
    func clean(format: UInt8) throws {
        let segments = [Self.segment(2, 11...20, format: format), Self.segment(1, 1...10, format: format), Self.segment(3, 21...25, format: format)]
        let plan = try WALRecovery.plan(segments: segments, snapshotLSN: 0)
        #expect(Self.lsns(plan) == (1...25).map(UInt64.init))
        #expect(plan.entries.allSatisfy { $0.record == Self.record(Int($0.lsn)) })
        #expect(plan.lastLSN == 25)
        if format == 1 {
            // Appends are written in format 2: never into a segment of format 1.
            #expect(plan.appendTo == nil && plan.lastKeptSequence == 3)
        } else {
            #expect(plan.appendTo?.sequence == 3 && plan.appendTo?.size == segments[2].bytes.count)
        }
        #expect(plan.truncate == nil && plan.remove.isEmpty && plan.warnings.isEmpty)
        // After a snapshot at 15, only 16...25 replay; a first segment starting before it is fine.
        let plan15 = try WALRecovery.plan(segments: [segments[0], segments[2]], snapshotLSN: 15)
        #expect(Self.lsns(plan15) == (16...25).map(UInt64.init))
        // Nothing but a snapshot.
        #expect(try WALRecovery.plan(segments: [], snapshotLSN: 9).lastLSN == 9)
    }

    @Test("zeros after the last segment's records are the writer's filled space: the log ends there, silently", arguments: [0, 1, 7, 8, 65536])
    func zeroFilledTail(zeros: Int) throws {
        var last = Self.segment(2, 11...20)
        let records = last.bytes.count
        last.bytes += [UInt8](repeating: 0, count: zeros)
        let plan = try WALRecovery.plan(segments: [Self.segment(1, 1...10), last], snapshotLSN: 0)
        #expect(Self.lsns(plan) == (1...20).map(UInt64.init))
        #expect(plan.warnings.isEmpty && plan.truncate == nil && plan.remove.isEmpty)
        #expect(plan.appendTo?.sequence == 2 && plan.appendTo?.size == records)
        #expect(plan.segments.last?.size == records)
        // A new segment holding only its header and zeros is the same.
        let empty = WALRecovery.Segment(
            sequence: 3, path: "wal/3", bytes: WALSegmentHeader(sequence: 3, firstLSN: 21).encoded + [UInt8](repeating: 0, count: zeros))
        let plan3 = try WALRecovery.plan(segments: [Self.segment(1, 1...10), Self.segment(2, 11...20), empty], snapshotLSN: 0)
        #expect(plan3.lastLSN == 20 && plan3.warnings.isEmpty && plan3.appendTo?.sequence == 3 && plan3.appendTo?.size == 32)
        // Zeros in any other segment are damage: that segment was trimmed before the next began.
        if zeros > 0 {
            #expect(throws: StoreError.self) {
                try WALRecovery.plan(segments: [last, Self.segment(3, 21...25)], snapshotLSN: 0)
            }
        }
    }

    static let corruptions = [
        "a flipped bit in an earlier segment", "a flipped bit mid-way in the last segment", "a missing segment",
        "a segment's first LSN out of line", "a damaged header", "a header naming another segment",
        "a length that runs past the end, with records after it", "a gap between the snapshot and the log",
    ]

    @Test("damage anywhere else refuses to start, naming the file and the offset", arguments: corruptions, formats)
    func corruption(kind: String, format: UInt8) throws {
        let first = Self.build(1, 1...10, format: format)
        var second = Self.segment(2, 11...20, format: format)
        let third = Self.build(3, 21...30, format: format)
        var segments = [first.segment, second, third.segment]
        var snapshot: UInt64 = 0
        var expected: (file: String, offset: Int)
        switch kind {
        case "a flipped bit in an earlier segment":
            segments[0].bytes[first.records[3]! + 10] ^= 0x04
            expected = (first.segment.path, first.cuts[3]!)
        case "a flipped bit mid-way in the last segment":
            segments[2].bytes[third.records[23]! + 9] ^= 0x80
            expected = (third.segment.path, third.cuts[23]!)
        case "a missing segment":
            second = Self.segment(4, 31...40, format: format)
            segments = [first.segment, second]
            expected = (second.path, 0)
        case "a segment's first LSN out of line":
            segments[1] = Self.segment(2, 12...21, format: format)
            expected = (second.path, 0)
        case "a damaged header":
            segments[1].bytes[3] ^= 0x01
            expected = (second.path, 0)
        case "a header naming another segment":
            segments[1] = WALRecovery.Segment(sequence: 2, path: second.path, bytes: Self.segment(7, 11...20, format: format).bytes)
            expected = (second.path, 0)
        case "a length that runs past the end, with records after it":
            segments[2].bytes[third.records[23]! + 1] = 0x40  // about 4 MiB: within the limit, past the end
            expected = (third.segment.path, third.cuts[23]!)
        default:
            segments = [Self.segment(1, 5...10, format: format), Self.segment(2, 11...20, format: format), third.segment]
            snapshot = 3
            expected = (first.segment.path, 0)
        }
        do {
            _ = try WALRecovery.plan(segments: segments, snapshotLSN: snapshot)
            Issue.record("\(kind) was accepted")
        } catch {
            #expect(error.isCorruption)
            #expect(error.message.contains(expected.file) && error.message.contains("offset \(expected.offset):"), "\(error.message)")
        }
    }

    @Test("--repair cuts at the first damage, drops what follows and counts it", arguments: formats)
    func repair(format: UInt8) throws {
        let built = Self.build(1, 1...10, format: format)
        var first = built.segment
        first.bytes[built.records[4]! + 9] ^= 0x10
        let cut = built.cuts[4]!
        let plan = try WALRecovery.plan(segments: [first, Self.segment(2, 11...20, format: format)], snapshotLSN: 0, repair: true)
        // In format 2 the damaged record's batch (records 4 to 6) goes whole: 4 is its first.
        #expect(Self.lsns(plan) == [1, 2, 3])
        #expect(plan.truncate?.sequence == 1 && plan.truncate?.offset == cut)
        #expect(plan.remove == [2])
        #expect(plan.lostRecords == 7 + 10)
        #expect(plan.lastLSN == 3)
        if format == 1 {
            #expect(plan.appendTo == nil && plan.lastKeptSequence == 1)
        } else {
            #expect(plan.appendTo?.sequence == 1 && plan.appendTo?.size == cut)
        }
    }

    @Test("segments wholly before the snapshot's start are not read: any of them may be missing or damaged, and all are listed to go")
    func coveredSegments() throws {
        let all = [Self.segment(1, 1...10), Self.segment(2, 11...20), Self.segment(3, 21...30), Self.segment(4, 31...40)]
        // A snapshot starting at 25: segments 1 and 2 hold only records it covers. Each subset of them
        // (a crash while they were deleted, in any order) plans the same.
        for kept in [[0, 1], [0], [1], []] {
            let plan = try WALRecovery.plan(segments: kept.map { all[$0] } + all[2...], snapshotLSN: 24)
            #expect(Self.lsns(plan) == (25...40).map(UInt64.init))
            #expect(plan.covered == kept.map { UInt64($0 + 1) })
            #expect(plan.segments.map(\.sequence) == [3, 4])
            #expect(plan.remove.isEmpty && plan.truncate == nil && plan.warnings.isEmpty && !plan.repaired)
            #expect(plan.lastLSN == 40 && plan.appendTo?.sequence == 4)
        }
        // Damage in a covered segment does not matter either: it is not read.
        var damaged = all[0]
        damaged.bytes[40] ^= 0x01
        #expect(try WALRecovery.plan(segments: [damaged] + all[1...], snapshotLSN: 24).covered == [1, 2])
        // A snapshot starting at a segment's first LSN covers every segment before it.
        let exact = try WALRecovery.plan(segments: all, snapshotLSN: 20)
        #expect(exact.covered == [1, 2] && Self.lsns(exact) == (21...40).map(UInt64.init))
        // Without a snapshot, nothing is covered.
        #expect(try WALRecovery.plan(segments: all, snapshotLSN: 0).covered.isEmpty)
        // After the snapshot's start, a missing segment is still corruption.
        #expect(throws: StoreError.corrupt(file: "", offset: 0, "")) {
            try WALRecovery.plan(segments: [all[0], all[1], all[3]], snapshotLSN: 24)
        }
    }

    @Test("a log that ends before the snapshot's start: appends go to a new segment, the last one trimmed of its zeros")
    func logEndsBeforeSnapshot() throws {
        var last = Self.segment(2, 11...20)
        let records = last.bytes.count
        last.bytes += [UInt8](repeating: 0, count: 4096)
        let plan = try WALRecovery.plan(segments: [Self.segment(1, 1...10), last], snapshotLSN: 29)
        #expect(Self.lsns(plan).isEmpty)
        #expect(plan.lastLSN == 29)
        #expect(plan.appendTo == nil && plan.lastKeptSequence == 2)
        #expect(plan.truncate?.sequence == 2 && plan.truncate?.offset == records)
        #expect(plan.warnings.count == 1 && plan.warnings[0].contains("before the snapshot's start 30"), "\(plan.warnings)")
        // Ending where the snapshot starts is the usual case: appends continue in the last segment.
        let usual = try WALRecovery.plan(segments: [Self.segment(1, 1...10), last], snapshotLSN: 20)
        #expect(usual.appendTo?.sequence == 2 && usual.appendTo?.size == records && usual.truncate == nil && usual.warnings.isEmpty)
    }

    @Test("random damage never crashes the scanner and never yields a record that was not written", arguments: formats)
    func fuzz(format: UInt8) {
        var generator = SystemRandomNumberGenerator()
        let segment = Self.segment(1, 1...30, format: format)
        for _ in 0..<2000 {
            var bytes = segment.bytes
            for _ in 0..<Int.random(in: 1...4, using: &generator) {
                let index = Int.random(in: 0..<bytes.count, using: &generator)
                bytes[index] = UInt8.random(in: 0...255, using: &generator)
            }
            if Bool.random(using: &generator) { bytes.removeLast(Int.random(in: 0..<bytes.count, using: &generator)) }
            let scan = WALScanner.scan(bytes, sequence: 1, isLast: Bool.random(using: &generator))
            for (position, record) in scan.records.enumerated() {
                #expect(record == Self.record(Int(scan.header!.firstLSN) + position))
            }
        }
    }
}
