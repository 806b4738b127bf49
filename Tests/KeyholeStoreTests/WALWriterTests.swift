import Foundation
import KeyholeStore
import Testing

/// The log on real files: appends, fdatasync, segment cuts, and recovery reading back what was written.
@Suite("WAL writer and directory")
struct WALWriterTests {
    let state: String
    let directory: WALDirectory

    init() throws {
        state = FileManager.default.temporaryDirectory.appendingPathComponent("kh-wal-\(UUID())").path
        try FileManager.default.createDirectory(atPath: state, withIntermediateDirectories: true)
        directory = WALDirectory(stateDirectory: state)
        try directory.create()
    }

    func cleanUp() { try? FileManager.default.removeItem(atPath: state) }

    static func record(_ n: Int) -> WALRecord {
        WALRecord(type: UInt8(1 + n % 3), payload: Array("payload of record \(n)".utf8))
    }

    /// Reads the directory back and plans recovery, as start-up does.
    func recover(snapshotLSN: UInt64 = 0, repair: Bool = false) throws -> WALRecovery.Plan {
        let plan = try WALRecovery.plan(segments: try directory.readSegments(), snapshotLSN: snapshotLSN, repair: repair)
        try directory.apply(plan)
        return plan
    }

    @Test("records appended and synced are read back, and appends continue after a restart")
    func roundTrip() throws {
        defer { cleanUp() }
        var writer: WALWriter? = try WALWriter(directory: directory, plan: try recover())
        #expect(FileManager.default.fileExists(atPath: directory.segmentPath(1)))
        for batch in 0..<10 {
            let range = try writer!.append((0..<10).map { Self.record(batch * 10 + $0 + 1) })
            #expect(range == UInt64(batch * 10 + 1)..<UInt64(batch * 10 + 11))
            try writer!.sync()
        }
        writer = nil
        var plan = try recover()
        #expect(plan.entries.map(\.record) == (1...100).map(Self.record))
        #expect(plan.lastLSN == 100)
        writer = try WALWriter(directory: directory, plan: plan)
        #expect(try writer!.append([Self.record(101)]) == 101..<102)
        try writer!.sync()
        writer = nil
        plan = try recover()
        #expect(plan.entries.count == 101 && plan.entries.last?.lsn == 101)
        #expect(try directory.readSegments().count == 1)
    }

    @Test("segments are cut at the configured size, and the LSNs run on across them")
    func segmentCut() throws {
        defer { cleanUp() }
        var configuration = WALWriter.Configuration()
        configuration.segmentBytes = 512
        let writer = try WALWriter(directory: directory, plan: try recover(), configuration: configuration)
        for n in 1...60 {
            try writer.append([Self.record(n)])
            if n % 7 == 0 { try writer.sync() }
        }
        try writer.sync()
        let segments = try directory.readSegments()
        #expect(segments.count >= 3)
        // Every segment but the last was trimmed to its records; the last one's records fit too.
        #expect(segments.dropLast().allSatisfy { $0.bytes.count <= 512 })
        #expect(writer.size <= 512)
        #expect(segments.map(\.sequence) == (1...UInt64(segments.count)).map { $0 })
        let plan = try recover()
        #expect(plan.warnings.isEmpty)
        #expect(plan.segments.map(\.size) == segments.dropLast().map(\.bytes.count) + [writer.size])
        #expect(plan.entries.map(\.lsn) == (1...60).map(UInt64.init))
        #expect(plan.entries.map(\.record) == (1...60).map(Self.record))
    }

    @Test("a torn tail on disk is truncated at start-up, and appends go on from there", arguments: [true, false])
    func tornTailOnDisk(zeroFilled: Bool) throws {
        defer { cleanUp() }
        var configuration = WALWriter.Configuration()
        if !zeroFilled { configuration.zeroFillBytes = 0 }
        var writer: WALWriter? = try WALWriter(directory: directory, plan: try recover(), configuration: configuration)
        try writer!.append((1...5).map(Self.record))
        try writer!.sync()
        let intact = writer!.size
        writer = nil
        // A crash during the next append: half a record reached the disk, over the zeros or at the end.
        var half: [UInt8] = []
        Self.record(6).append(lsn: 6, to: &half)
        let handle = try #require(FileHandle(forWritingAtPath: directory.segmentPath(1)))
        try handle.seek(toOffset: UInt64(intact))
        handle.write(Data(half.prefix(half.count / 2)))
        try handle.close()
        #expect(try Self.fileSize(directory.segmentPath(1)) == (zeroFilled ? 64 << 10 : intact + half.count / 2))
        let plan = try recover()
        #expect(plan.warnings.count == 1)
        #expect(plan.lastLSN == 5)
        let size = try FileManager.default.attributesOfItem(atPath: directory.segmentPath(1))[.size] as? Int
        #expect(size == intact)
        writer = try WALWriter(directory: directory, plan: plan, configuration: configuration)
        try writer!.append([Self.record(6)])
        try writer!.sync()
        writer = nil
        #expect(try recover().entries.map(\.record) == (1...6).map(Self.record))
    }

    static func fileSize(_ path: String) throws -> Int {
        try #require(try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int)
    }

    @Test("appends write inside zero-filled space: the file grows 64 KiB at a time, reopens where the records end, and is trimmed at a cut")
    func zeroFilledSpace() throws {
        defer { cleanUp() }
        let step = 64 << 10
        var writer: WALWriter? = try WALWriter(directory: directory, plan: try recover())
        let path = directory.segmentPath(1)
        #expect(try Self.fileSize(path) == step)
        var n = 0
        var sizes: Set<Int> = []
        while writer!.size < 3 * step {
            n += 1
            try writer!.append([Self.record(n)])
            if n % 50 == 0 { try writer!.sync() }
            let fileSize = try Self.fileSize(path)
            // Zeros after the records, at most two steps of them, ending on a step boundary.
            #expect(fileSize % step == 0 && fileSize > writer!.size && fileSize - writer!.size <= 2 * step)
            sizes.insert(fileSize)
        }
        try writer!.sync()
        let size = writer!.size
        // The file changed size about once per step, not once per append (of about 60 bytes).
        #expect(sizes.count <= 4 && n > 3 * step / 64)
        let bytes = try directory.readSegments()[0].bytes
        #expect(bytes[size...].allSatisfy { $0 == 0 })
        writer = nil

        // Start-up: the log ends where the zeros start; nothing to warn about, nothing cut.
        var plan = try recover()
        #expect(plan.warnings.isEmpty && plan.truncate == nil && plan.remove.isEmpty)
        #expect(plan.lastLSN == UInt64(n))
        #expect(plan.appendTo?.sequence == 1 && plan.appendTo?.size == size)
        #expect(plan.segments.map(\.size) == [size])
        writer = try WALWriter(directory: directory, plan: plan)
        try writer!.append([Self.record(n + 1)])
        try writer!.sync()
        #expect(try Self.fileSize(path) == bytes.count)

        // A cut trims the zeros of the segment it ends: only the last segment may have any.
        let cut = try writer!.cut()
        #expect(cut.sequence == 2 && cut.firstLSN == UInt64(n + 2))
        #expect(try Self.fileSize(path) == size + WALBatchHeader.size + Self.record(n + 1).encodedSize)
        try writer!.append([Self.record(n + 2)])
        try writer!.sync()
        writer = nil
        plan = try recover()
        #expect(plan.entries.map(\.record) == (1...(n + 2)).map(Self.record))
        #expect(plan.warnings.isEmpty)
    }

    @Test("a log of format 1, as an older keyholed left it: read whole, and appends go on in a new segment of format 2")
    func formatOneLog() throws {
        defer { cleanUp() }
        var old = WALSegmentHeader(sequence: 1, firstLSN: 1, format: 1).encoded
        for n in 1...5 { Self.record(n).append(lsn: UInt64(n), to: &old) }
        let records = old.count
        try Data(old + [UInt8](repeating: 0, count: 64 << 10)).write(to: URL(fileURLWithPath: directory.segmentPath(1)))
        var plan = try recover()
        #expect(plan.entries.map(\.record) == (1...5).map(Self.record))
        #expect(plan.warnings.isEmpty)
        // The format-1 segment, no longer the last, gave back its zeros.
        #expect(try Self.fileSize(directory.segmentPath(1)) == records)
        var writer: WALWriter? = try WALWriter(directory: directory, plan: plan)
        #expect(writer!.sequence == 2 && writer!.nextLSN == 6)
        try writer!.append((6...8).map(Self.record))
        try writer!.sync()
        writer = nil
        let segments = try directory.readSegments()
        #expect(segments.map { WALSegmentHeader($0.bytes)?.format } == [1, 2])
        plan = try recover()
        #expect(plan.entries.map(\.record) == (1...8).map(Self.record) && plan.entries.last?.lsn == 8)
        #expect(plan.warnings.isEmpty && plan.appendTo?.sequence == 2)
    }

    @Test("corruption on disk stops start-up; --repair cuts there, keeps what came before, and appends resume")
    func corruptionAndRepair() throws {
        defer { cleanUp() }
        var configuration = WALWriter.Configuration()
        configuration.segmentBytes = 400
        var writer: WALWriter? = try WALWriter(directory: directory, plan: try recover(), configuration: configuration)
        for n in 1...40 { try writer!.append([Self.record(n)]) }
        try writer!.sync()
        writer = nil
        let segments = try directory.readSegments()
        #expect(segments.count >= 3)
        // Flip a byte in the first record of the second segment.
        var damaged = segments[1].bytes
        damaged[WALSegmentHeader.size + 10] ^= 0x20
        try Data(damaged).write(to: URL(fileURLWithPath: segments[1].path))
        do {
            _ = try recover()
            Issue.record("corruption was accepted")
        } catch let error as StoreError {
            #expect(error.isCorruption && error.message.contains(segments[1].path) && error.message.contains("offset 32"), "\(error)")
        }
        let kept = try WALRecovery.plan(segments: segments.prefix(1).map { $0 }, snapshotLSN: 0).lastLSN
        let plan = try recover(repair: true)
        #expect(plan.lastLSN == kept)
        #expect(plan.lostRecords == 40 - Int(kept))
        #expect(try directory.readSegments().map(\.sequence) == [1, 2])
        writer = try WALWriter(directory: directory, plan: plan, configuration: configuration)
        try writer!.append([Self.record(999)])
        try writer!.sync()
        writer = nil
        let after = try recover()
        #expect(after.entries.last?.lsn == kept + 1)
        #expect(after.entries.last?.record == Self.record(999))
    }
}
