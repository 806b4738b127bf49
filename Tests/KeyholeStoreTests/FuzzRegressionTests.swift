import Foundation
import Testing
@testable import KeyholeStore

/// Inputs keyhole-fuzz found (Sources/keyhole-fuzz, `make fuzz`), kept so that what they broke stays fixed.
@Suite("Fuzz regressions: store files")
struct StoreFuzzRegressionTests {
    /// The `snapshot` target's out-of-memory: a header whose CRC matches but whose counts claim far more
    /// entries than the file holds had start-up reserve room for 2^26 sessions (over 6 GB of slots and
    /// a gigabyte-sized index) before reading an entry, so a damaged snapshot got keyholed killed
    /// instead of reported. The counts here are the fuzz input's.
    @Test("a snapshot header claiming more entries than its file holds is corruption, and no room is made for them")
    func snapshotCountsBeyondTheFile() throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let path = directory.path + "/" + SnapshotHeader.fileName(9)
        var file = SnapshotHeader(
            startLSN: 9, createdAt: -315_533_447_097_032_520, principals: 4, sessions: 16_192_692_460_210_618_368,
            outbox: 1 << 50
        ).encoded
        file.appendFramed(sequence: 0) { $0 += SnapshotTests.principal("user-0", user: true) }
        try Data(file).write(to: URL(fileURLWithPath: path))

        var tables = StoreTables()
        do {
            _ = try SnapshotReader.load(path, into: &tables, blockBytes: 14)
            Issue.record("loaded")
        } catch {
            #expect(error.isCorruption)
            #expect(error.message.contains("where the header counts"), "\(error.message)")
        }
        // Room for at most what a file this size can hold (a write-back of `tables` survives the throw).
        #expect(tables.sessionSlots.elements.capacity <= file.count / SnapshotReader.smallestSessionEntryBytes + 16)
        #expect(tables.principalSlots.elements.capacity <= file.count / SnapshotReader.smallestPrincipalEntryBytes + 16)
    }

    /// The `wal-record` target's crash: a segment header (CRC valid) whose first LSN is 2^64 - 1,
    /// then a valid record, as in the fuzz input (mode 0x03: header and record CRCs repaired). Counting
    /// the record overflowed the LSN: a trap in WALScanner, which start-up reaches after a snapshot
    /// ending at 2^64 - 2, or under --repair once the snapshot is set aside.
    @Test("a segment whose first LSN is the last there can be is corruption, not a trap", arguments: [true, false], [UInt8(1), 2])
    func segmentAtTheLastLSN(validRecord: Bool, format: UInt8) throws {
        var segment = WALSegmentHeader(sequence: 1, firstLSN: .max, format: format).encoded
        var record: [UInt8] = []
        if validRecord {
            StoreRecord.noop.walRecord.append(lsn: .max, to: &record)
        } else {
            // A record whose CRC does not match: the torn-tail check looks for LSNs max and max + 1.
            record = [0, 0, 0, 1, 0xDE, 0xAD, 0xBE, 0xEF, 0x01]
        }
        if format == 2 { segment += WALBatchHeader(firstLSN: .max, length: UInt64(record.count)).encoded }
        segment += record
        let scan = WALScanner.scan(segment, sequence: 1, isLast: true)
        #expect(scan.count == 0)
        if validRecord && format == 1 {
            #expect(scan.ending == .corrupt(offset: WALSegmentHeader.size, reason: "a record past the last LSN there can be"))
        } else if validRecord {
            #expect(scan.ending == .corrupt(offset: WALSegmentHeader.size, reason: "a record past the last LSN there can be, at offset 56"))
        }
        // After a snapshot at LSN 0 the segment does not follow it (refused before it is scanned); after
        // one ending at 2^64 - 2 (or a snapshot set aside by --repair) it is scanned, as start-up does.
        for snapshotLSN: UInt64 in [0, .max - 1] {
            for repair in [false, true] {
                let plan = try? WALRecovery.plan(
                    segments: [WALRecovery.Segment(sequence: 1, path: "0000000000000001.wal", bytes: segment)],
                    snapshotLSN: snapshotLSN, repair: repair)
                #expect((plan != nil) == (repair || (snapshotLSN > 0 && !validRecord)), "after \(snapshotLSN), repair \(repair)")
            }
        }
    }

    /// LSNs start at 1, and start-up takes the LSN before a snapshot's start, or before the first
    /// segment's first LSN, as already covered: a header (CRC valid) saying 0 made that subtraction trap.
    @Test("a snapshot starting at LSN 0, or a segment whose first LSN is 0, is damaged")
    func lsnZero() {
        var snapshot = SnapshotHeader(startLSN: 0, createdAt: 1, principals: 0, sessions: 0).encoded
        guard case .failure(let failure) = SnapshotHeader.decode(snapshot) else {
            Issue.record("a snapshot header starting at LSN 0 decoded")
            return
        }
        #expect(failure.reason.contains("start LSN is 0"))
        snapshot = SnapshotHeader(startLSN: 1, createdAt: 1, principals: 0, sessions: 0).encoded
        #expect((try? SnapshotHeader.decode(snapshot).get())?.startLSN == 1)
        #expect(WALSegmentHeader(WALSegmentHeader(sequence: 1, firstLSN: 0).encoded) == nil)
        #expect(WALSegmentHeader(WALSegmentHeader(sequence: 1, firstLSN: 1).encoded)?.firstLSN == 1)
    }

    @Test("the smallest entries the reservation assumes are the smallest the snapshot writer makes")
    func smallestEntriesMatchTheWriters() {
        var session: [UInt8] = []
        session.appendFramed(sequence: 0) {
            SnapshotEntry.appendSession(
                SnapshotEntry.SessionState(
                    id: SessionID(high: 1, low: 2), check: SessionCheck(high: 3, low: 4), createdAt: 0, expiresAt: 0,
                    idleSeconds: 0, lastSeenAt: 0, data: nil),
                to: &$0)
        }
        var principal: [UInt8] = []
        principal.appendFramed(sequence: 0) {
            SnapshotEntry.appendPrincipal(Principal(issuer: "", sub: ""), userJSON: nil, to: &$0)
        }
        #expect(session.count == SnapshotReader.smallestSessionEntryBytes)
        #expect(principal.count == SnapshotReader.smallestPrincipalEntryBytes)
    }
}
