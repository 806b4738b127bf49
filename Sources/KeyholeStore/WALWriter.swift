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
///
/// The segment is kept zero-filled ahead of its last record (WAL.md, "Zero-filled space"), so that
/// most appends write inside the file: their fdatasync then has only data to write, not the file's
/// new size (on ext4 about a third less time per sync, and per durable request).
public final class WALWriter {
    /// Where segments are cut.
    public struct Configuration: Sendable {
        /// A segment grows to about this size, then a new one starts (WAL.md: 64 MiB).
        public var segmentBytes = 64 << 20
        /// Zeros written ahead of the last record, in steps of this many bytes (0: plain appends).
        /// Only the append that reaches past them changes the file's size, once per step.
        public var zeroFillBytes = 64 << 10
        /// Makes a segment's data durable: fdatasync(2), true when it succeeded. A test puts a failing
        /// one in its place (a failpoint, as etcd has) to see what keyholed does after a failed sync;
        /// `unsynced` is the part of the segment written since the last good one.
        public var syncData: @Sendable (_ fd: Int32, _ unsynced: Range<Int>) -> Bool = { fd, _ in fdatasync(fd) == 0 }

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
    /// The file's size: records up to `size`, zeros after.
    private var filled: Int
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
            // Kept in `fd` only once it is known good: a throw before every property is set runs no
            // deinit to close it, and one after would run deinit's close as well as this one.
            let opened = open(file, O_WRONLY | O_CLOEXEC)
            guard opened >= 0 else { throw .io("cannot open \(file): \(WALDirectory.error())") }
            var info = stat()
            guard fstat(opened, &info) == 0 else {
                let message = "cannot stat \(file): \(WALDirectory.error())"
                close(opened)
                throw .io(message)
            }
            fd = opened
            self.sequence = sequence
            self.size = size
            durableSize = size
            filled = max(size, Int(info.st_size))
        } else {
            sequence = 0
            size = 0
            durableSize = 0
            filled = 0
            try startSegment(after: plan.lastKeptSequence)
        }
    }

    deinit { if fd >= 0 { close(fd) } }

    /// Writes `records` as one batch (not yet durable: see `sync`), starting a new segment first when
    /// they would take this one past the limit. Returns their LSNs.
    ///
    /// - Throws: `StoreError.io` when the write fails; the segment is then as it was before the call.
    @discardableResult
    public func append(_ records: [WALRecord]) throws(StoreError) -> Range<UInt64> {
        buffer.removeAll(keepingCapacity: true)
        buffer.append(contentsOf: repeatElement(0, count: WALBatchHeader.size))
        let first = nextLSN
        var lsn = first
        for record in records {
            record.append(lsn: lsn, to: &buffer)
            lsn += 1
        }
        try append(framed: &buffer, count: records.count)
        return first..<lsn
    }

    /// Writes `count` records already encoded with the LSNs from `nextLSN` on as one batch, as
    /// `append(framed:count:)` does (with a copy: the store's queue has room for the header instead).
    ///
    /// - Throws: `StoreError.io` when the write fails; the segment is then as it was before the call.
    public func append(encoded bytes: [UInt8], count: Int) throws(StoreError) {
        buffer.removeAll(keepingCapacity: true)
        buffer.append(contentsOf: repeatElement(0, count: WALBatchHeader.size))
        buffer.append(contentsOf: bytes)
        try append(framed: &buffer, count: count)
    }

    /// Writes `count` records as one batch (WAL.md, "Batches"): `batch` holds room for the batch
    /// header (`WALBatchHeader.size` bytes, filled in here), then the records already encoded with the
    /// LSNs from `nextLSN` on (the store encodes them while queueing, under its lock). Cuts a new
    /// segment first when the batch would take this one past the limit. One pwrite(2), no copy: this is
    /// every durable change's path.
    ///
    /// - Throws: `StoreError.io` when the write fails; the segment is then as it was before the call.
    public func append(framed batch: inout [UInt8], count: Int) throws(StoreError) {
        precondition(batch.count >= WALBatchHeader.size, "a batch without room for its header")
        guard count > 0 else { return }
        if size > WALSegmentHeader.size && size + batch.count > configuration.segmentBytes {
            // The old segment is made durable before the new one exists: the log never has a hole.
            // Its records may have been acknowledged already (batch mode): never cut them back here.
            try sync(rollingBack: false)
            try startSegment(after: sequence)
            // The records' CRCs cover their LSNs, which do not depend on the segment: no re-encoding.
        }
        let header = WALBatchHeader(firstLSN: nextLSN, length: UInt64(batch.count - WALBatchHeader.size))
        batch.withUnsafeMutableBytes { header.encode(into: $0) }
        try write(batch, at: size)
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
        guard configuration.syncData(fd, durableSize..<size) else {
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

    /// Writes `bytes` at `offset` (the end of the records); when they reach past the zeros, more zeros
    /// after them in the same step, so that the sync that pays for the new size pays for the next ones.
    private func write(_ bytes: [UInt8], at offset: Int) throws(StoreError) {
        let end = offset + bytes.count
        let step = configuration.zeroFillBytes
        var written = WALDirectory.writeAll(fd, bytes, at: offset)
        if written, step > 0, end > filled {
            let target = (end / step + 2) * step
            written = Self.writeZeros(fd, from: end, to: target)
            if written { filled = target }
        }
        guard written else {
            let message = "cannot write \(directory.segmentPath(sequence)): \(WALDirectory.error())"
            rollBack(to: offset)
            throw .io(message)
        }
        size = end
        filled = max(filled, end)
    }

    /// Cuts the segment back to `offset`; if even that fails, the next write at `offset` overwrites
    /// whatever is there, and recovery would see a torn tail at worst.
    private func rollBack(to offset: Int) {
        // Zeros or a partial record may stay past `offset` if this fails: `filled` then still
        // covers them, so that trimming at a cut removes them.
        if ftruncate(fd, off_t(offset)) == 0 { filled = offset }
        size = offset
    }

    private static let zeros = [UInt8](repeating: 0, count: 64 << 10)

    private static func writeZeros(_ fd: Int32, from start: Int, to end: Int) -> Bool {
        var offset = start
        while offset < end {
            let count = min(end - offset, zeros.count)
            let written = zeros.withUnsafeBytes { WALDirectory.writeAll(fd, UnsafeRawBufferPointer(rebasing: $0[..<count]), at: offset) }
            guard written else { return false }
            offset += count
        }
        return true
    }

    /// Gives the current segment back the zeros after its last record, durably, before another
    /// segment follows it: only the last segment may end in zeros (WAL.md).
    private func trimZeros() throws(StoreError) {
        guard fd >= 0 else { return }
        guard ftruncate(fd, off_t(size)) == 0, fsync(fd) == 0 else {
            throw .io("cannot trim \(directory.segmentPath(sequence)): \(WALDirectory.error())")
        }
        filled = size
    }

    /// Creates segment `previous + 1`, its header and first zeros durable, and the directory entry
    /// durable.
    private func startSegment(after previous: UInt64) throws(StoreError) {
        try trimZeros()
        let next = previous + 1
        let file = directory.segmentPath(next)
        let newFD = open(file, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard newFD >= 0 else { throw .io("cannot create \(file): \(WALDirectory.error())") }
        let header = WALSegmentHeader(sequence: next, firstLSN: nextLSN).encoded
        let zeroFill = configuration.zeroFillBytes
        let written = WALDirectory.writeAll(newFD, header, at: 0) && Self.writeZeros(newFD, from: header.count, to: max(header.count, zeroFill))
        guard written, fdatasync(newFD) == 0 else {
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
        filled = max(header.count, zeroFill)
    }
}
