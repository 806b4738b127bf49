#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Appends records to the log on disk and makes them durable (WAL.md). Owned by one task at a time
/// (the group committer): it is not safe to use from two at once.
///
/// A failed write or sync never leaves a partial or unsynced record in the file for later records to
/// follow: the segment is cut back to its last durable size, and the records since are not in the log
/// (their requests were not, or will not be, acknowledged as durable).
public final class WALWriter {
    /// Where segments are cut.
    public struct Configuration: Sendable {
        /// A segment grows to about this size, then a new one starts (WAL.md: 64 MiB).
        public var segmentBytes = 64 << 20

        /// The defaults.
        public init() {}
    }

    private let directory: WALDirectory
    private let configuration: Configuration
    private var fd: Int32 = -1
    /// The segment written to, its size, and its size when last made durable.
    public private(set) var sequence: UInt64
    public private(set) var size: Int
    private var durableSize: Int
    /// The LSN the next record gets, and the first LSN not yet durable.
    public private(set) var nextLSN: UInt64
    private var durableLSN: UInt64
    private var buffer: [UInt8] = []

    /// Opens the log where recovery `plan` left it: appends continue in its last segment, or in a new one.
    public init(directory: WALDirectory, plan: WALRecovery.Plan, configuration: Configuration = Configuration()) throws(StoreError) {
        self.directory = directory
        self.configuration = configuration
        nextLSN = plan.lastLSN + 1
        durableLSN = nextLSN
        if let (sequence, size) = plan.appendTo {
            let file = directory.segmentPath(sequence)
            fd = open(file, O_WRONLY | O_CLOEXEC)
            guard fd >= 0 else { throw .io("cannot open \(file): \(WALDirectory.error())") }
            self.sequence = sequence
            self.size = size
            durableSize = size
        } else {
            sequence = 0
            size = 0
            durableSize = 0
            try startSegment(after: plan.lastKeptSequence)
        }
    }

    deinit { if fd >= 0 { close(fd) } }

    /// Writes `records` (not yet durable: see `sync`), starting a new segment first when they would
    /// take this one past the limit. Returns their LSNs.
    ///
    /// - Throws: `StoreError.io` when the write fails; the segment is then as it was before the call.
    @discardableResult
    public func append(_ records: [WALRecord]) throws(StoreError) -> Range<UInt64> {
        buffer.removeAll(keepingCapacity: true)
        let first = nextLSN
        var lsn = first
        for record in records {
            record.append(lsn: lsn, to: &buffer)
            lsn += 1
        }
        try append(encoded: buffer, count: records.count)
        return first..<lsn
    }

    /// Writes `count` records already encoded with the LSNs from `nextLSN` on (the store encodes them
    /// while queueing, under its lock), cutting a new segment first when they would take this one past
    /// the limit.
    ///
    /// - Throws: `StoreError.io` when the write fails; the segment is then as it was before the call.
    public func append(encoded bytes: [UInt8], count: Int) throws(StoreError) {
        if size > WALSegmentHeader.size && size + bytes.count > configuration.segmentBytes {
            // The old segment is made durable before the new one exists: the log never has a hole.
            // Its records may have been acknowledged already (batch mode): never cut them back here.
            try sync(rollingBack: false)
            try startSegment(after: sequence)
            // The records' CRCs cover their LSNs, which do not depend on the segment: no re-encoding.
        }
        try write(bytes, at: size)
        size += bytes.count
        nextLSN += UInt64(count)
    }

    /// Ends the current segment (made durable) and starts a new one, unless the current one holds no
    /// record yet. Returns the segment appends now go to and the LSN its first record gets: every
    /// segment before it holds only earlier records.
    ///
    /// - Throws: `StoreError.io` when the sync or the new segment fails.
    public func cut() throws(StoreError) -> (sequence: UInt64, firstLSN: UInt64) {
        if size > WALSegmentHeader.size {
            try sync(rollingBack: false)
            try startSegment(after: sequence)
        }
        return (sequence, nextLSN)
    }

    /// Makes everything appended durable (fdatasync).
    ///
    /// - Throws: `StoreError.io` when the sync fails. What was appended since the last good sync is
    ///   then cut from the segment (a failed fdatasync may have dropped those pages), and its LSNs are
    ///   given out again.
    ///
    /// - Parameter rollingBack: on failure, cut what was appended since the last good sync (when its
    ///   changes were not acknowledged yet); `false` leaves it (batch mode, where they were).
    public func sync(rollingBack: Bool = true) throws(StoreError) {
        guard size != durableSize else { return }
        guard fdatasync(fd) == 0 else {
            let message = "cannot sync \(directory.segmentPath(sequence)): \(WALDirectory.error())"
            if rollingBack {
                rollBack(to: durableSize)
                nextLSN = durableLSN
            }
            throw .io(message)
        }
        durableSize = size
        durableLSN = nextLSN
    }

    private func write(_ bytes: [UInt8], at offset: Int) throws(StoreError) {
        guard WALDirectory.writeAll(fd, bytes, at: offset) else {
            let message = "cannot write \(directory.segmentPath(sequence)): \(WALDirectory.error())"
            rollBack(to: offset)
            throw .io(message)
        }
    }

    /// Cuts the segment back to `offset`; if even that fails, the next write at `offset` overwrites
    /// whatever is there, and recovery would see a torn tail at worst.
    private func rollBack(to offset: Int) {
        _ = ftruncate(fd, off_t(offset))
        size = offset
    }

    /// Creates segment `previous + 1`, its header durable, and the directory entry durable.
    private func startSegment(after previous: UInt64) throws(StoreError) {
        let next = previous + 1
        let file = directory.segmentPath(next)
        let newFD = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard newFD >= 0 else { throw .io("cannot create \(file): \(WALDirectory.error())") }
        let header = WALSegmentHeader(sequence: next, firstLSN: nextLSN).encoded
        let written = header.withUnsafeBytes { pwrite(newFD, $0.baseAddress, $0.count, 0) }
        guard written == header.count, fdatasync(newFD) == 0 else {
            let message = "cannot write \(file): \(WALDirectory.error())"
            close(newFD)
            unlink(file)
            throw .io(message)
        }
        do {
            try directory.syncDirectory()
        } catch {
            close(newFD)
            unlink(file)
            throw error
        }
        if fd >= 0 { close(fd) }
        fd = newFD
        sequence = next
        size = header.count
        durableSize = size
    }
}
