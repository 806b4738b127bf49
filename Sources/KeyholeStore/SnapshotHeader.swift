/// The header every snapshot starts with (SNAPSHOT.md, "Header"): 56 bytes in format 2, which
/// keyholed writes, 48 in format 1, which it still reads.
struct SnapshotHeader: Sendable, Equatable {
    /// Its size in bytes in the format written.
    static let size = 56
    /// The size of a format 1 header, the fewest bytes any header takes.
    static let format1Size = 48
    /// `KHSNP`, two zero bytes, then the format.
    static let magicPrefix: [UInt8] = [0x4B, 0x48, 0x53, 0x4E, 0x50, 0x00, 0x00]
    /// The format written.
    static let format: UInt8 = 2

    /// Replay resumes at this LSN: the snapshot holds the effect of every record before it.
    var startLSN: UInt64
    /// When it was taken.
    var createdAt: Int64
    /// How many principal entries and session entries follow.
    var principals: UInt64
    var sessions: UInt64
    /// How many outbox entries (format 2; none in format 1).
    var outbox: UInt64
    /// Where the entries start: the header's size in its format.
    var entriesOffset = SnapshotHeader.size

    /// The header in the format written.
    var encoded: [UInt8] {
        var bytes = Self.magicPrefix + [Self.format]
        bytes.reserveCapacity(Self.size)
        bytes.appendBigEndian(startLSN)
        bytes.appendBigEndian(createdAt)
        bytes.appendBigEndian(principals)
        bytes.appendBigEndian(sessions)
        bytes.appendBigEndian(outbox)
        bytes.appendBigEndian(CRC32C.checksum(bytes))
        bytes.append(contentsOf: [0, 0, 0, 0])
        return bytes
    }

    init(startLSN: UInt64, createdAt: Int64, principals: UInt64, sessions: UInt64, outbox: UInt64 = 0) {
        self.startLSN = startLSN
        self.createdAt = createdAt
        self.principals = principals
        self.sessions = sessions
        self.outbox = outbox
    }

    /// Reads a header (format 1 or 2) from the start of `bytes`, which holds at least `size` bytes
    /// unless the file is shorter; why not, when they are not one.
    static func decode(_ bytes: [UInt8]) -> Result<SnapshotHeader, SnapshotReadFailure> {
        guard bytes.count >= format1Size else { return .failure(.init(offset: 0, "the file is shorter than its header")) }
        guard Array(bytes[0..<7]) == magicPrefix, (1...format).contains(bytes[7]) else {
            let known = bytes[0..<7].elementsEqual(magicPrefix)
            return .failure(.init(offset: 0, known
                ? "it is a snapshot of format \(bytes[7]), newer than this keyholed reads (1 and 2)"
                : "it is not a keyholed snapshot"))
        }
        // The counts end at 40 in format 1, at 48 in format 2; the CRC and four zero bytes follow.
        let countsEnd = bytes[7] == 1 ? 40 : 48
        guard bytes.count >= countsEnd + 8 else { return .failure(.init(offset: 0, "the file is shorter than its header")) }
        guard CRC32C.checksum(bytes[0..<countsEnd]) == bytes.bigEndianUInt32(at: countsEnd),
            bytes[(countsEnd + 4)..<(countsEnd + 8)].allSatisfy({ $0 == 0 })
        else {
            return .failure(.init(offset: 0, "the header is damaged"))
        }
        // LSNs start at 1, and start-up takes the one before the start LSN as the snapshot's last.
        guard bytes.bigEndianUInt64(at: 8) > 0 else { return .failure(.init(offset: 0, "its start LSN is 0")) }
        var header = SnapshotHeader(
            startLSN: bytes.bigEndianUInt64(at: 8), createdAt: Int64(bitPattern: bytes.bigEndianUInt64(at: 16)),
            principals: bytes.bigEndianUInt64(at: 24), sessions: bytes.bigEndianUInt64(at: 32),
            outbox: countsEnd == 48 ? bytes.bigEndianUInt64(at: 40) : 0)
        header.entriesOffset = countsEnd + 8
        return .success(header)
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
