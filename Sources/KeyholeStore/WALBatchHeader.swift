/// The 24 bytes before each batch of records in a format-2 segment (WAL.md, "Batches"): where the batch
/// ends, so that a torn last batch (a power cut while it was written) is recognised as a whole, even
/// when its later sectors reached the disk and its earlier ones did not.
public struct WALBatchHeader: Sendable, Hashable {
    /// Its size in bytes.
    public static let size = 24
    /// The first four bytes. The first, 0x80, is never the first byte of a record (whose length is at
    /// most 16 MiB: 0x00 or 0x01), and never zero.
    public static let marker: [UInt8] = [0x80, 0x4B, 0x48, 0x42]
    private static let markerValue: UInt32 = 0x804B_4842
    /// The least a batch's records take: one record, of a header and a type byte.
    static let minimumLength = WALRecord.headerBytes + 1

    /// The LSN of the batch's first record.
    public var firstLSN: UInt64
    /// The bytes of records that follow the header.
    public var length: UInt64

    /// A header.
    public init(firstLSN: UInt64, length: UInt64) {
        self.firstLSN = firstLSN
        self.length = length
    }

    /// The 24 bytes.
    public var encoded: [UInt8] {
        [UInt8](unsafeUninitializedCapacity: Self.size) { buffer, initialized in
            encode(into: UnsafeMutableRawBufferPointer(buffer))
            initialized = Self.size
        }
    }

    /// Writes the 24 bytes at the start of `raw` (the writer's hot path: no allocation).
    func encode(into raw: UnsafeMutableRawBufferPointer) {
        raw.storeBytes(of: Self.markerValue.bigEndian, toByteOffset: 0, as: UInt32.self)
        raw.storeBytes(of: firstLSN.bigEndian, toByteOffset: 4, as: UInt64.self)
        raw.storeBytes(of: length.bigEndian, toByteOffset: 12, as: UInt64.self)
        var crc = CRC32C()
        crc.update(UnsafeRawBufferPointer(rebasing: raw[0..<20]))
        raw.storeBytes(of: crc.value.bigEndian, toByteOffset: 20, as: UInt32.self)
    }

    /// Reads a header at `offset` of `bytes`; `nil` when the bytes there are not one (short, another
    /// marker, a bad CRC, or a length too short for a record). The LSN and whether the batch fits in
    /// the file are the reader's to check.
    public init?(_ bytes: [UInt8], at offset: Int) {
        guard offset >= 0, bytes.count - offset >= Self.size else { return nil }
        let parsed = bytes.withUnsafeBytes { raw -> (UInt64, UInt64)? in
            guard UInt32(bigEndian: raw.loadUnaligned(fromByteOffset: offset, as: UInt32.self)) == Self.markerValue else { return nil }
            var crc = CRC32C()
            crc.update(UnsafeRawBufferPointer(rebasing: raw[offset..<(offset + 20)]))
            guard UInt32(bigEndian: raw.loadUnaligned(fromByteOffset: offset + 20, as: UInt32.self)) == crc.value else { return nil }
            return (
                UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt64.self)),
                UInt64(bigEndian: raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt64.self))
            )
        }
        guard let (firstLSN, length) = parsed, length >= UInt64(Self.minimumLength) else { return nil }
        self.firstLSN = firstLSN
        self.length = length
    }
}
