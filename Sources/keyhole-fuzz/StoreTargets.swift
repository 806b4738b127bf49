#if KEYHOLE_FUZZ
#if canImport(Glibc)
import Glibc
#endif
@testable import KeyholeStore

/// The store's on-disk decoders: what a damaged (or crafted) state directory can do at start-up.
///
/// Both formats are checksummed, so most mutations would only ever reach the CRC checks. The first
/// control byte therefore asks the target to repair the checksums (and counts) of the mutated bytes
/// first (`StoreFixups`), which sends them on to the record and entry decoders behind the checks.
enum StoreTargets {
    /// Input: a mode byte, a snapshot LSN byte, then one segment file (sequence 1).
    /// Mode bits: 1 fix the header's CRC (and sequence), 2 fix the records' CRCs, 4 a segment 2 follows
    /// (so this one is not the last), 8 `--repair`.
    ///
    /// Planned and replayed as `Store.open` does: each record decoded (`StoreRecord`) and applied to
    /// tables, then expired sessions swept. A record that decodes must encode to the same record.
    static func walRecord(_ input: [UInt8]) {
        var control = ControlBytes(input)
        let mode = control.byte()
        let snapshotLSN = UInt64(control.byte())
        var segment = control.rest
        if mode & 1 != 0 { StoreFixups.walHeader(&segment) }
        if mode & 2 != 0 { StoreFixups.walRecords(&segment) }
        var files: [(sequence: UInt64, path: String)] = [(1, "0000000000000001.wal")]
        var contents = [segment]
        if mode & 4 != 0 {
            files.append((2, "0000000000000002.wal"))
            contents.append([])
        }

        var tables = StoreTables()
        var accepted = 0
        let plan = try? WALRecovery.plan(
            files: files, read: { index throws(StoreError) in contents[index] }, snapshotLSN: snapshotLSN, repair: mode & 8 != 0
        ) { lsn, record in
            guard let decoded = StoreRecord(record) else { return "a record that does not parse" }
            fuzzCheck(decoded.walRecord == record, "record type 0x\(String(record.type, radix: 16)) decodes inexactly")
            accepted += 1
            if lsn > snapshotLSN { tables.apply(decoded) }
            return nil
        }
        var cursor = 0
        repeat { cursor = tables.sweep(now: 1_800_000_000, from: cursor, limit: 64).next } while cursor != 0

        let scan = WALScanner.scan(segment, sequence: 1, isLast: mode & 4 == 0)
        fuzzCheck(scan.records.count == scan.count && scan.offsets.count == scan.count, "scan counts disagree")
        fuzzCheck(zip(scan.offsets, scan.offsets.dropFirst()).allSatisfy { $0 < $1 }, "record offsets go backwards")
        guard let plan else { return }
        fuzzCheck(plan.replayed <= accepted, "\(plan.replayed) replayed of \(accepted) accepted")
        fuzzCheck(plan.keptBytes >= 0 && plan.keptBytes <= segment.count, "keptBytes \(plan.keptBytes) of \(segment.count)")
        if let (sequence, offset) = plan.truncate {
            fuzzCheck(sequence == 1 && offset > 0 && offset <= segment.count, "truncate at \(sequence):\(offset)")
        }
        if let append = plan.appendTo, append.sequence == 1 {
            fuzzCheck(append.size >= WALSegmentHeader.size && append.size <= segment.count, "append at \(append.size)")
        }
    }

    /// Input: a mode byte, a block-size byte, then one snapshot file.
    /// Mode bits: 1 fix the header's CRC, 2 fix the entries' CRCs, 4 make the header's counts those of
    /// the entries (then fix its CRC), 8 read in blocks of 1 + the block-size byte instead of 64 KiB.
    ///
    /// Loaded as `Store.open` does. A snapshot that loads is written out from the tables it made and
    /// loaded again: that must succeed and hold the same principals, users, sessions and outbox.
    static func snapshot(_ input: [UInt8]) {
        var control = ControlBytes(input)
        let mode = control.byte()
        // Not keyholed's 4 MiB: filling a block that size costs a debug build a second per input, and
        // 64 KiB already holds any input whole (make fuzz's -max_len is 8 KiB), as 4 MiB holds most files.
        let blockBytes = mode & 8 != 0 ? 1 + Int(control.byte()) : 64 << 10
        var file = control.rest
        if mode & 2 != 0 { StoreFixups.snapshotEntries(&file) }
        if mode & 4 != 0 { StoreFixups.snapshotCounts(&file) }
        if mode & 5 != 0 { StoreFixups.snapshotHeader(&file) }

        var tables = StoreTables()
        guard let header = try? load(file, into: &tables, blockBytes: blockBytes) else { return }
        var rewritten = SnapshotHeader(startLSN: header.startLSN, createdAt: header.createdAt, principals: 0, sessions: 0)
        let entries = serialize(tables, into: &rewritten)
        var reloaded = StoreTables()
        do throws(StoreError) {
            _ = try load(rewritten.encoded + entries, into: &reloaded, blockBytes: blockBytes)
        } catch {
            fuzzCheck(false, "a snapshot written from loaded tables does not load: \(error)")
        }
        var again = SnapshotHeader(startLSN: 0, createdAt: 0, principals: 0, sessions: 0)
        fuzzCheck(SnapshotGroups(serialize(reloaded, into: &again)) == SnapshotGroups(entries), "a snapshot changed in a round trip")
        fuzzCheck(reloaded.sessionCount == tables.sessionCount && reloaded.userCount == tables.userCount
            && reloaded.outbox.count == tables.outbox.count, "counts changed in a round trip")
    }

    /// Where snapshots are written to be loaded: SnapshotReader reads a path, as start-up does.
    private static let path: String = {
        let directory = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp"
        return "\(directory)/keyhole-fuzz-\(getpid()).snapshot"
    }()

    private static func load(_ bytes: [UInt8], into tables: inout StoreTables, blockBytes: Int) throws(StoreError) -> SnapshotHeader {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { fatalError("keyhole-fuzz: cannot create \(path)") }
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        close(fd)
        guard written == bytes.count else { fatalError("keyhole-fuzz: cannot write \(path)") }
        defer { unlink(path) }
        return try SnapshotReader.load(path, into: &tables, blockBytes: blockBytes)
    }

    /// The entries `tables` makes in a snapshot, as the snapshotter writes them; counts them in `header`.
    private static func serialize(_ tables: StoreTables, into header: inout SnapshotHeader) -> [UInt8] {
        var bytes: [UInt8] = []
        var index: UInt64 = 0
        let outbox = tables.appendOutbox(index: &index, to: &bytes)
        let (_, count) = tables.appendEntries(from: 0, limit: Int.max, index: &index, to: &bytes)
        header.principals = UInt64(count.principals)
        header.sessions = UInt64(count.sessions)
        header.outbox = UInt64(outbox.outbox)
        return bytes
    }
}
#endif
