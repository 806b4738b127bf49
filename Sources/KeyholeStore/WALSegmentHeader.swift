/// The 32-byte header every segment file starts with (WAL.md, "Segment header").
public struct WALSegmentHeader: Sendable, Hashable {
    /// Its size in bytes.
    public static let size = 32
    /// `KHWAL` and two zero bytes; the format byte follows.
    static let magicPrefix: [UInt8] = [0x4B, 0x48, 0x57, 0x41, 0x4C, 0x00, 0x00]
    /// The format written: 2, records in batches (WAL.md, "Batches"). Format 1 (records back to back)
    /// is still read.
    public static let format: UInt8 = 2
    /// The magic of the format written.
    public static let magic: [UInt8] = magicPrefix + [format]

    /// The segment's sequence number (also its file name).
    public var sequence: UInt64
    /// The LSN of its first record.
    public var firstLSN: UInt64
    /// Its format: 1 or 2.
    public var format: UInt8

    /// A header; `format` 1 only to make a segment as an older keyholed did (tests).
    public init(sequence: UInt64, firstLSN: UInt64, format: UInt8 = Self.format) {
        self.sequence = sequence
        self.firstLSN = firstLSN
        self.format = format
    }

    /// The 32 bytes.
    public var encoded: [UInt8] {
        var bytes = Self.magicPrefix + [format]
        bytes.reserveCapacity(Self.size)
        bytes.appendBigEndian(sequence)
        bytes.appendBigEndian(firstLSN)
        bytes.appendBigEndian(CRC32C.checksum(bytes))
        bytes.append(contentsOf: [0, 0, 0, 0])
        return bytes
    }

    /// Reads a header from the first 32 bytes of `bytes`; `nil` when they are not one (short, another
    /// magic, a format other than 1 or 2, a bad CRC, non-zero reserved bytes, or a first LSN of 0: LSNs
    /// start at 1, and start-up subtracts one from it).
    public init?(_ bytes: some RandomAccessCollection<UInt8>) {
        guard bytes.count >= Self.size else { return nil }
        let header = Array(bytes.prefix(Self.size))
        guard Array(header[0..<7]) == Self.magicPrefix, (1...Self.format).contains(header[7]),
            header[28..<32].allSatisfy({ $0 == 0 }), CRC32C.checksum(header[0..<24]) == header.bigEndianUInt32(at: 24)
        else { return nil }
        guard header.bigEndianUInt64(at: 16) > 0 else { return nil }
        sequence = header.bigEndianUInt64(at: 8)
        firstLSN = header.bigEndianUInt64(at: 16)
        format = header[7]
    }

    /// The file name of segment `sequence`: 16 lowercase hex digits and `.wal`.
    public static func fileName(_ sequence: UInt64) -> String {
        let hex = String(sequence, radix: 16)
        return String(repeating: "0", count: max(0, 16 - hex.count)) + hex + ".wal"
    }

    /// The sequence number a segment file name stands for, or `nil` for any other name.
    public static func sequence(fromFileName name: String) -> UInt64? {
        guard name.utf8.count == 20, name.hasSuffix(".wal") else { return nil }
        let digits = name.dropLast(4)
        guard digits.allSatisfy({ ("0"..."9").contains($0) || ("a"..."f").contains($0) }) else { return nil }
        return UInt64(digits, radix: 16)
    }
}

extension Array where Element == UInt8 {
    mutating func appendBigEndian<T: FixedWidthInteger>(_ value: T) {
        Swift.withUnsafeBytes(of: value.bigEndian) { append(contentsOf: $0) }
    }

    func bigEndianUInt32(at offset: Int) -> UInt32 {
        (offset..<offset + 4).reduce(0) { $0 << 8 | UInt32(self[$1]) }
    }

    func bigEndianUInt64(at offset: Int) -> UInt64 {
        (offset..<offset + 8).reduce(0) { $0 << 8 | UInt64(self[$1]) }
    }
}
