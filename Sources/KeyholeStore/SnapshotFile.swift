#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Writes one snapshot (SNAPSHOT.md): entries into `<lsn>.snap.tmp`, synced every `syncBytes` as it
/// grows, then the header, fsync, rename and directory fsync. Used by one thread at a time.
final class SnapshotWriter {
    /// How much of the file may be written and not yet synced (Redis syncs its rewrites every 4 MB the
    /// same way). On ext4 the log's fdatasync commits the journal, which first writes out the data of
    /// every file whose blocks that commit allocates: a snapshot of hundreds of MB left to one fsync at
    /// the end made the log's syncs wait for most of it (tens of ms each) while it was written.
    static let syncBytes = 4 << 20

    let startLSN: UInt64
    let path: String
    private let directory: SnapshotDirectory
    private let temporaryPath: String
    private var fd: Int32
    /// Where the next entry goes, how many entries of each kind went before it.
    private(set) var size = SnapshotHeader.size
    private(set) var principals: UInt64 = 0
    private(set) var sessions: UInt64 = 0
    private(set) var outbox: UInt64 = 0
    /// Principals with a user record (for the report only).
    private(set) var users = 0
    /// Bytes written since the last sync.
    private var unsynced = 0

    /// The index the next entry's CRC covers.
    var nextIndex: UInt64 { principals + sessions + outbox }

    init(directory: SnapshotDirectory, startLSN: UInt64) throws(StoreError) {
        self.directory = directory
        self.startLSN = startLSN
        path = directory.snapshotPath(startLSN)
        temporaryPath = path + ".tmp"
        fd = open(temporaryPath, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .io("cannot create \(temporaryPath): \(WALDirectory.error())") }
    }

    deinit { abandon() }

    /// Writes entries encoded by the tables, numbered from `nextIndex`.
    func write(_ bytes: [UInt8], _ count: StoreTables.ChunkCount) throws(StoreError) {
        try write(bytes, at: size)
        size += bytes.count
        unsynced += bytes.count
        if unsynced >= Self.syncBytes {
            guard fdatasync(fd) == 0 else { throw .io("cannot sync \(temporaryPath): \(WALDirectory.error())") }
            unsynced = 0
        }
        principals += UInt64(count.principals)
        sessions += UInt64(count.sessions)
        outbox += UInt64(count.outbox)
        users += count.users
    }

    /// Writes the header and makes the snapshot durable under its name. Returns its size in bytes.
    func finish(createdAt: Int64) throws(StoreError) -> Int {
        let header = SnapshotHeader(startLSN: startLSN, createdAt: createdAt, principals: principals, sessions: sessions, outbox: outbox)
        try write(header.encoded, at: 0)
        guard fsync(fd) == 0 else { throw .io("cannot sync \(temporaryPath): \(WALDirectory.error())") }
        close(fd)
        fd = -1
        guard rename(temporaryPath, path) == 0 else {
            let message = "cannot rename \(temporaryPath): \(WALDirectory.error())"
            unlink(temporaryPath)
            throw .io(message)
        }
        try directory.syncDirectory()
        return size
    }

    /// Drops an unfinished snapshot.
    func abandon() {
        guard fd >= 0 else { return }
        close(fd)
        fd = -1
        unlink(temporaryPath)
    }

    private func write(_ bytes: [UInt8], at offset: Int) throws(StoreError) {
        guard WALDirectory.writeAll(fd, bytes, at: offset) else { throw .io("cannot write \(temporaryPath): \(WALDirectory.error())") }
    }
}

/// Reads a snapshot into tables, a block at a time (SNAPSHOT.md, "Reading").
enum SnapshotReader {
    /// Loads the snapshot at `path` into `tables` (which should be empty); returns its header.
    ///
    /// - Throws: `StoreError.corrupt` naming the file and the offset of the damage, `.io`.
    static func load(_ path: String, into tables: inout StoreTables, blockBytes: Int = 4 << 20) throws(StoreError) -> SnapshotHeader {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .io("cannot open \(path): \(WALDirectory.error())") }
        defer { close(fd) }
        var status = stat()
        let fileBytes = fstat(fd, &status) == 0 ? Int(status.st_size) : 0
        var buffer: [UInt8] = []
        var atEnd = false
        /// The file offset of `buffer[0]`.
        var base = 0
        func fill() throws(StoreError) {
            // No more than the file still holds (one byte at least, to see its end): a snapshot of a
            // few entries does not get a block of 4 MiB zeroed for it.
            let wanted = fileBytes > 0 ? max(1, min(blockBytes, fileBytes - (base + buffer.count))) : blockBytes
            let start = buffer.count
            buffer.append(contentsOf: repeatElement(0, count: wanted))
            var count = 0
            repeat {
                count = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + start, wanted) }
            } while count < 0 && errno == EINTR
            guard count >= 0 else { throw .io("cannot read \(path): \(WALDirectory.error())") }
            buffer.removeLast(wanted - count)
            atEnd = count == 0
        }
        func corrupt(_ failure: SnapshotReadFailure) -> StoreError { .corrupt(file: path, offset: failure.offset, failure.reason) }

        while buffer.count < SnapshotHeader.size && !atEnd { try fill() }
        let header: SnapshotHeader
        switch SnapshotHeader.decode(buffer) {
        case .success(let decoded): header = decoded
        case .failure(let failure): throw corrupt(failure)
        }
        // The header's counts are claims until the entries are read: room is made for no more entries
        // than the file can hold, or a damaged header (its CRC matching all the same) would have start-up
        // reserve gigabytes and be killed for it instead of reporting the damage (found by keyhole-fuzz).
        tables.reserve(
            sessions: min(Int(clamping: min(header.sessions, 1 << 26)), fileBytes / smallestSessionEntryBytes),
            principals: min(Int(clamping: min(header.principals, 1 << 26)), fileBytes / smallestPrincipalEntryBytes))
        var position = header.entriesOffset
        var principals: UInt64 = 0
        var sessions: UInt64 = 0
        var outbox: UInt64 = 0
        /// The slot of the principal the next session entries belong to, and whether one did yet.
        var current: UInt32?
        var currentHasSessions = true
        while true {
            if buffer.count - position < WALRecord.headerBytes || buffer.count - position < entryEnd(buffer, position) - position {
                if atEnd {
                    guard position == buffer.count else {
                        throw corrupt(.init(offset: base + position, "an entry is cut short"))
                    }
                    break
                }
                // Keep the partial entry, drop what was read, and read on.
                buffer.removeFirst(position)
                base += position
                position = 0
                try fill()
                continue
            }
            let offset = base + position
            let length = Int(buffer.bigEndianUInt32(at: position))
            guard length >= 1, length <= WALRecord.maximumBodyBytes else {
                throw corrupt(.init(offset: offset, "an entry length of \(length) is invalid"))
            }
            let end = position + WALRecord.headerBytes + length
            let body = buffer[(position + WALRecord.headerBytes)..<end]
            var crc = CRC32C()
            crc.update(bigEndian: principals + sessions + outbox)
            crc.update(body)
            guard crc.value == buffer.bigEndianUInt32(at: position + 4) else {
                throw corrupt(.init(offset: offset, "an entry's CRC does not match"))
            }
            guard let entry = SnapshotEntry(body: body) else {
                throw corrupt(.init(offset: offset, "an entry of type 0x\(String(body.first!, radix: 16)) does not parse"))
            }
            switch entry {
            case .principal(let principal, let user):
                guard currentHasSessions else { throw corrupt(.init(offset: offset, "a principal with neither user nor sessions before it")) }
                principals += 1
                current = tables.loadPrincipal(principal, user)
                currentHasSessions = user != nil
            case .session(let session):
                guard let principal = current else { throw corrupt(.init(offset: offset, "a session before any principal")) }
                sessions += 1
                current = tables.loadSession(session, principal: principal)
                currentHasSessions = true
            case .outbox(let entry):
                guard current == nil else { throw corrupt(.init(offset: offset, "an outbox entry after a principal")) }
                outbox += 1
                tables.outbox[entry.id] = entry
            }
            guard principals <= header.principals, sessions <= header.sessions, outbox <= header.outbox else {
                throw corrupt(.init(offset: offset, "more entries than the header counts"))
            }
            position = end
        }
        guard currentHasSessions else {
            throw corrupt(.init(offset: base + position, "a principal with neither user nor sessions at the end"))
        }
        guard principals == header.principals, sessions == header.sessions, outbox == header.outbox else {
            throw corrupt(.init(offset: base + position,
                "\(principals) principals, \(sessions) sessions and \(outbox) outbox entries where the header counts "
                    + "\(header.principals), \(header.sessions) and \(header.outbox)"))
        }
        return header
    }

    /// The fewest bytes a session entry takes, framing included: no data.
    static let smallestSessionEntryBytes = WALRecord.headerBytes + 1 + 16 + 16 + 8 + 8 + 4 + 8 + 4
    /// The fewest bytes a principal entry takes, framing included: empty issuer and sub, no user.
    static let smallestPrincipalEntryBytes = WALRecord.headerBytes + 1 + 2 + 2 + 4

    /// Where the entry at `position` ends, when its length can be read and is valid; otherwise a
    /// position that makes the caller decide with what it has.
    private static func entryEnd(_ buffer: [UInt8], _ position: Int) -> Int {
        guard buffer.count - position >= WALRecord.headerBytes else { return Int.max }
        let length = Int(buffer.bigEndianUInt32(at: position))
        guard length >= 1, length <= WALRecord.maximumBodyBytes else { return position }
        return position + WALRecord.headerBytes + length
    }
}
