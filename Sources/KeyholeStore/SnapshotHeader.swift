/// The 48-byte header every snapshot starts with (SNAPSHOT.md, "Header").
struct SnapshotHeader: Sendable, Equatable {
    /// Its size in bytes.
    static let size = 48
    /// `KHSNP`, two zero bytes, format 1.
    static let magic: [UInt8] = [0x4B, 0x48, 0x53, 0x4E, 0x50, 0x00, 0x00, 0x01]

    /// Replay resumes at this LSN: the snapshot holds the effect of every record before it.
    var startLSN: UInt64
    /// When it was taken.
    var createdAt: Int64
    /// How many principal entries and session entries follow.
    var principals: UInt64
    var sessions: UInt64

    /// The 48 bytes.
    var encoded: [UInt8] {
        var bytes = Self.magic
        bytes.reserveCapacity(Self.size)
        bytes.appendBigEndian(startLSN)
        bytes.appendBigEndian(createdAt)
        bytes.appendBigEndian(principals)
        bytes.appendBigEndian(sessions)
        bytes.appendBigEndian(CRC32C.checksum(bytes))
        bytes.append(contentsOf: [0, 0, 0, 0])
        return bytes
    }

    init(startLSN: UInt64, createdAt: Int64, principals: UInt64, sessions: UInt64) {
        self.startLSN = startLSN
        self.createdAt = createdAt
        self.principals = principals
        self.sessions = sessions
    }

    /// Reads a header from the first 48 bytes of `bytes`; why not, when they are not one.
    static func decode(_ bytes: [UInt8]) -> Result<SnapshotHeader, SnapshotReadFailure> {
        guard bytes.count >= size else { return .failure(.init(offset: 0, "the file is shorter than its header")) }
        guard Array(bytes[0..<8]) == magic else { return .failure(.init(offset: 0, "it is not a keyholed snapshot (format 1)")) }
        guard CRC32C.checksum(bytes[0..<40]) == bytes.bigEndianUInt32(at: 40), bytes[44..<48].allSatisfy({ $0 == 0 }) else {
            return .failure(.init(offset: 0, "the header is damaged"))
        }
        return .success(SnapshotHeader(
            startLSN: bytes.bigEndianUInt64(at: 8), createdAt: Int64(bitPattern: bytes.bigEndianUInt64(at: 16)),
            principals: bytes.bigEndianUInt64(at: 24), sessions: bytes.bigEndianUInt64(at: 32)))
    }

    /// The file name of the snapshot starting at `lsn`: 16 lowercase hex digits and `.snap`.
    static func fileName(_ lsn: UInt64) -> String {
        let hex = String(lsn, radix: 16)
        return String(repeating: "0", count: max(0, 16 - hex.count)) + hex + ".snap"
    }

    /// The start LSN a snapshot file name stands for, or `nil` for any other name.
    static func startLSN(fromFileName name: String) -> UInt64? {
        guard name.utf8.count == 21, name.hasSuffix(".snap") else { return nil }
        let digits = name.dropLast(5)
        guard digits.allSatisfy({ ("0"..."9").contains($0) || ("a"..."f").contains($0) }) else { return nil }
        return UInt64(digits, radix: 16)
    }
}

/// Why a snapshot cannot be read, and where.
struct SnapshotReadFailure: Error {
    var offset: Int
    var reason: String

    init(offset: Int, _ reason: String) {
        self.offset = offset
        self.reason = reason
    }
}
