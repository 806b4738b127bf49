import KeyholeStore
import Testing

/// Every way a log can end or break, and what start-up does about it (WAL.md, "Reading and recovery").
@Suite("WAL recovery")
struct WALRecoveryTests {
    static func record(_ n: Int) -> WALRecord {
        WALRecord(type: UInt8(1 + n % 5), payload: Array("record \(n)".utf8) + [UInt8](repeating: UInt8(n & 0xFF), count: n % 40))
    }

    /// A segment holding records `lsns` (LSN n holds record n).
    static func segment(_ sequence: UInt64, _ lsns: ClosedRange<Int>) -> WALRecovery.Segment {
        var bytes = WALSegmentHeader(sequence: sequence, firstLSN: UInt64(lsns.lowerBound)).encoded
        for lsn in lsns { record(lsn).append(lsn: UInt64(lsn), to: &bytes) }
        return WALRecovery.Segment(sequence: sequence, path: "wal/\(WALSegmentHeader.fileName(sequence))", bytes: bytes)
    }

    static func lsns(_ plan: WALRecovery.Plan) -> [UInt64] { plan.entries.map(\.lsn) }

    @Test("a clean log replays every record after the snapshot, in order, across segments")
    func clean() throws {
        let segments = [Self.segment(2, 11...20), Self.segment(1, 1...10), Self.segment(3, 21...25)]
        let plan = try WALRecovery.plan(segments: segments, snapshotLSN: 0)
        #expect(Self.lsns(plan) == (1...25).map(UInt64.init))
        #expect(plan.entries.allSatisfy { $0.record == Self.record(Int($0.lsn)) })
        #expect(plan.lastLSN == 25)
        #expect(plan.appendTo?.sequence == 3 && plan.appendTo?.size == segments[2].bytes.count)
        #expect(plan.truncate == nil && plan.remove.isEmpty)
        // After a snapshot at 15, only 16...25 replay; a first segment starting before it is fine.
        let plan15 = try WALRecovery.plan(segments: [segments[0], segments[2]], snapshotLSN: 15)
        #expect(Self.lsns(plan15) == (16...25).map(UInt64.init))
        // Nothing but a snapshot.
        #expect(try WALRecovery.plan(segments: [], snapshotLSN: 9).lastLSN == 9)
    }

    @Test("a torn write at the end of the last segment is cut off, with a warning", arguments: [
        "half a record header", "a record cut short", "a last record with a bad CRC", "a record with a bad CRC, then zeros",
        "a record whose first bytes never reached the disk, in zeros", "only part of the header of a new segment",
    ])
    func tornTail(kind: String) throws {
        var last = Self.segment(2, 11...20)
        let intact = last.bytes.count
        var tail: [UInt8] = []
        Self.record(21).append(lsn: 21, to: &tail)
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
        let segments = kind.hasPrefix("only") ? [Self.segment(1, 1...10), Self.segment(2, 11...20), last] : [Self.segment(1, 1...10), last]
        let plan = try WALRecovery.plan(segments: segments, snapshotLSN: 0)
        #expect(plan.lastLSN == 20)
        #expect(Self.lsns(plan) == (1...20).map(UInt64.init))
        if kind.hasPrefix("only") {
            #expect(plan.remove == [3])
            #expect(plan.appendTo?.sequence == 2)
        } else {
            #expect(plan.truncate?.sequence == 2 && plan.truncate?.offset == intact)
            #expect(plan.appendTo?.sequence == 2 && plan.appendTo?.size == intact)
        }
        #expect(plan.warnings.count == 1)
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

    @Test("damage anywhere else refuses to start, naming the file and the offset", arguments: [
        "a flipped bit in an earlier segment", "a flipped bit mid-way in the last segment", "a missing segment",
        "a segment's first LSN out of line", "a damaged header", "a header naming another segment",
        "a length that runs past the end, with records after it", "a gap between the snapshot and the log",
    ])
    func corruption(kind: String) throws {
        var first = Self.segment(1, 1...10)
        var second = Self.segment(2, 11...20)
        var third = Self.segment(3, 21...30)
        var snapshot: UInt64 = 0
        var expectedFile = ""
        var expectedOffset = 0
        let offsetOfRecord3 = WALSegmentHeader.size + (1...2).map { Self.record($0).encodedSize }.reduce(0, +)
        let offsetOfRecord23 = WALSegmentHeader.size + (21...22).map { Self.record($0).encodedSize }.reduce(0, +)
        switch kind {
        case "a flipped bit in an earlier segment":
            first.bytes[offsetOfRecord3 + 10] ^= 0x04
            (expectedFile, expectedOffset) = (first.path, offsetOfRecord3)
        case "a flipped bit mid-way in the last segment":
            third.bytes[offsetOfRecord23 + 9] ^= 0x80
            (expectedFile, expectedOffset) = (third.path, offsetOfRecord23)
        case "a missing segment":
            second = Self.segment(4, 31...40)
            (expectedFile, expectedOffset) = (second.path, 0)
        case "a segment's first LSN out of line":
            second = Self.segment(2, 12...21)
            (expectedFile, expectedOffset) = (second.path, 0)
        case "a damaged header":
            second.bytes[3] ^= 0x01
            (expectedFile, expectedOffset) = (second.path, 0)
        case "a header naming another segment":
            second = WALRecovery.Segment(sequence: 2, path: second.path, bytes: Self.segment(7, 11...20).bytes)
            (expectedFile, expectedOffset) = (second.path, 0)
        case "a length that runs past the end, with records after it":
            third.bytes[offsetOfRecord23 + 1] = 0x40  // about 4 MiB: within the limit, past the end
            (expectedFile, expectedOffset) = (third.path, offsetOfRecord23)
        default:
            first = Self.segment(1, 5...10)
            second = Self.segment(2, 11...20)
            third = Self.segment(3, 21...30)
            snapshot = 3
            (expectedFile, expectedOffset) = (first.path, 0)
        }
        let segments = kind == "a missing segment" ? [first, second, third].filter { $0.sequence != 3 } : [first, second, third]
        do {
            _ = try WALRecovery.plan(segments: segments, snapshotLSN: snapshot)
            Issue.record("\(kind) was accepted")
        } catch {
            #expect(error.isCorruption)
            #expect(error.message.contains(expectedFile) && error.message.contains("offset \(expectedOffset)"), "\(error.message)")
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

    @Test("--repair cuts at the first damage, drops what follows and counts it")
    func repair() throws {
        var first = Self.segment(1, 1...10)
        let second = Self.segment(2, 11...20)
        let offsetOfRecord4 = WALSegmentHeader.size + (1...3).map { Self.record($0).encodedSize }.reduce(0, +)
        first.bytes[offsetOfRecord4 + 9] ^= 0x10
        let plan = try WALRecovery.plan(segments: [first, second], snapshotLSN: 0, repair: true)
        #expect(Self.lsns(plan) == [1, 2, 3])
        #expect(plan.truncate?.sequence == 1 && plan.truncate?.offset == offsetOfRecord4)
        #expect(plan.remove == [2])
        #expect(plan.lostRecords == 7 + 10)
        #expect(plan.lastLSN == 3)
        #expect(plan.appendTo?.sequence == 1 && plan.appendTo?.size == offsetOfRecord4)
    }

    @Test("random damage never crashes the scanner and never yields a record that was not written")
    func fuzz() {
        var generator = SystemRandomNumberGenerator()
        let segment = Self.segment(1, 1...30)
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
