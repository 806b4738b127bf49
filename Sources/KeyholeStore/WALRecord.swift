/// One record of the log: a type byte and its payload (WAL.md, "Records").
public struct WALRecord: Sendable, Hashable {
    /// The largest body (type byte and payload).
    public static let maximumBodyBytes = 16 << 20
    /// The bytes before the body: length and CRC.
    public static let headerBytes = 8

    /// What the record does; `WALRecordTypes.md` lists the types.
    public var type: UInt8
    /// The type's payload.
    public var payload: [UInt8]

    /// A record.
    public init(type: UInt8, payload: [UInt8]) {
        self.type = type
        self.payload = payload
    }

    /// The bytes the record takes in a segment.
    public var encodedSize: Int { Self.headerBytes + 1 + payload.count }

    /// Appends the record, as the record with log sequence number `lsn`, to `bytes`.
    public func append(lsn: UInt64, to bytes: inout [UInt8]) {
        precondition(1 + payload.count <= Self.maximumBodyBytes, "WAL record over 16 MiB")
        var crc = CRC32C()
        crc.update(bigEndian: lsn)
        crc.update(CollectionOfOne(type))
        crc.update(payload)
        bytes.appendBigEndian(UInt32(1 + payload.count))
        bytes.appendBigEndian(crc.value)
        bytes.append(type)
        bytes.append(contentsOf: payload)
    }
}

extension Array where Element == UInt8 {
    /// Appends one framed body (WAL.md, "Records"): the length, the CRC-32C over `sequence` (a record's
    /// LSN, or a snapshot entry's index) and the body, then the body `writeBody` appends.
    mutating func appendFramed(sequence: UInt64, _ writeBody: (inout [UInt8]) -> Void) {
        let start = count
        append(contentsOf: repeatElement(0, count: WALRecord.headerBytes))
        writeBody(&self)
        let length = count - start - WALRecord.headerBytes
        precondition(length >= 1 && length <= WALRecord.maximumBodyBytes, "a framed body of \(length) bytes")
        var crc = CRC32C()
        crc.update(bigEndian: sequence)
        withUnsafeBytes { crc.update(UnsafeRawBufferPointer(rebasing: $0[(start + WALRecord.headerBytes)...])) }
        withUnsafeMutableBytes { bytes in
            bytes.storeBytes(of: UInt32(length).bigEndian, toByteOffset: start, as: UInt32.self)
            bytes.storeBytes(of: crc.value.bigEndian, toByteOffset: start + 4, as: UInt32.self)
        }
    }
}
