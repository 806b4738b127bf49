import KeyholeStore
import Testing

/// CRC-32C, segment headers and record encoding, as WAL.md writes them down.
@Suite("WAL format")
struct WALFormatTests {
    @Test("CRC-32C matches the published check values (RFC 3720 appendix B.4)")
    func crc32c() {
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.checksum([UInt8](repeating: 0, count: 32)) == 0x8A91_36AA)
        #expect(CRC32C.checksum([UInt8](repeating: 0xFF, count: 32)) == 0x62A8_AB43)
        #expect(CRC32C.checksum(Array(0..<32)) == 0x46DD_794E)
        #expect(CRC32C.checksum(Array((0..<32).reversed())) == 0x113F_DB5C)
        // Fed in pieces of every size, the value is the same (the 8-byte loop and the tail agree).
        let data = (0..<1000).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ 7) }
        let whole = CRC32C.checksum(data)
        for split in [1, 3, 7, 8, 9, 500, 999] {
            var crc = CRC32C()
            crc.update(data[..<split])
            crc.update(data[split...])
            #expect(crc.value == whole)
        }
    }

    @Test("a segment header round-trips; any damage to it is refused")
    func header() {
        let header = WALSegmentHeader(sequence: 0x1234, firstLSN: 987_654_321)
        let bytes = header.encoded
        #expect(bytes.count == WALSegmentHeader.size)
        #expect(Array(bytes.prefix(8)) == [0x4B, 0x48, 0x57, 0x41, 0x4C, 0, 0, 2])
        #expect(WALSegmentHeader(bytes) == header)
        for index in 0..<WALSegmentHeader.size {
            var damaged = bytes
            damaged[index] ^= 0x01
            #expect(WALSegmentHeader(damaged) == nil, "byte \(index)")
        }
        #expect(WALSegmentHeader(bytes.prefix(31)) == nil)
        // Format 1 is still read; a format after 2 is not (a log from a newer keyholed).
        let old = WALSegmentHeader(sequence: 0x1234, firstLSN: 987_654_321, format: 1)
        #expect(old.encoded[7] == 1 && WALSegmentHeader(old.encoded) == old)
        #expect(WALSegmentHeader(WALSegmentHeader(sequence: 1, firstLSN: 1, format: 3).encoded) == nil)
    }

    @Test("a batch header is a marker, the first LSN, the length and a CRC over them; any damage to it is refused")
    func batchHeader() {
        let header = WALBatchHeader(firstLSN: 0x0102_0304_0506_0708, length: 0x1234)
        let bytes = header.encoded
        #expect(bytes.count == WALBatchHeader.size)
        #expect(Array(bytes.prefix(20)) == [0x80, 0x4B, 0x48, 0x42, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0x12, 0x34])
        #expect(bytes.suffix(4).reduce(UInt32(0)) { $0 << 8 | UInt32($1) } == CRC32C.checksum(bytes.prefix(20)))
        #expect(WALBatchHeader([9, 9] + bytes, at: 2) == header)
        for index in 0..<WALBatchHeader.size {
            var damaged = bytes
            damaged[index] ^= 0x01
            #expect(WALBatchHeader(damaged, at: 0) == nil, "byte \(index)")
        }
        #expect(WALBatchHeader(Array(bytes.prefix(23)), at: 0) == nil)
        // Shorter than one record: never written.
        #expect(WALBatchHeader(WALBatchHeader(firstLSN: 1, length: 8).encoded, at: 0) == nil)
        // Never mistaken for a record: its first byte is no record length's.
        #expect(bytes[0] > UInt8(WALRecord.maximumBodyBytes >> 24))
    }

    @Test("segment file names are 16 hex digits")
    func fileNames() {
        #expect(WALSegmentHeader.fileName(1) == "0000000000000001.wal")
        #expect(WALSegmentHeader.fileName(0xABC) == "0000000000000abc.wal")
        #expect(WALSegmentHeader.sequence(fromFileName: "0000000000000abc.wal") == 0xABC)
        for name in ["abc.wal", "0000000000000ABC.wal", "0000000000000abc.wal.tmp", "000000000000000g.wal", "snapshot"] {
            #expect(WALSegmentHeader.sequence(fromFileName: name) == nil, "\(name)")
        }
    }

    @Test("a record is length, CRC over its LSN and body, then the body")
    func recordEncoding() {
        var bytes: [UInt8] = []
        WALRecord(type: 7, payload: [1, 2, 3]).append(lsn: 42, to: &bytes)
        #expect(bytes.count == 12)
        #expect(Array(bytes.prefix(4)) == [0, 0, 0, 4])
        var crc = CRC32C()
        crc.update(bigEndian: 42)
        crc.update([7, 1, 2, 3])
        let stored = bytes[4..<8].reduce(UInt32(0)) { $0 << 8 | UInt32($1) }
        #expect(stored == crc.value)
        #expect(Array(bytes.suffix(4)) == [7, 1, 2, 3])
    }
}
