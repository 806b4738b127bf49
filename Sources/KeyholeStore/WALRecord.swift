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
