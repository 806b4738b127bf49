#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `wal` directory on disk: listing and reading segments, carrying out a recovery plan.
public struct WALDirectory: Sendable {
    /// Makes the entries of the directory at a path (files created, renamed or removed in it) durable:
    /// true when it did, else false with errno set.
    public typealias DirectorySync = @Sendable (_ path: String) -> Bool

    /// fsync(2) of the directory.
    public static let fsyncDirectory: DirectorySync = { path in
        let fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        return fsync(fd) == 0
    }

    /// The directory's path.
    public let path: String
    /// The state directory it is in.
    let stateDirectory: String
    /// How directories are synced: `fsyncDirectory`, or a test's failpoint.
    let directorySync: DirectorySync

    /// The `wal` directory under `stateDirectory` (created, mode 0700, by `create()`).
    public init(stateDirectory: String, syncDirectory: @escaping DirectorySync = WALDirectory.fsyncDirectory) {
        self.stateDirectory = stateDirectory
        path = stateDirectory + "/wal"
        directorySync = syncDirectory
    }

    /// Creates the directory if it is missing, and makes its entry in the state directory durable
    /// (also when it exists: a crash may have come between an earlier mkdir and that sync).
    public func create() throws(StoreError) {
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw .io("cannot create \(path): \(Self.error())")
        }
        try sync(directory: stateDirectory)
    }

    /// The path of segment `sequence`.
    public func segmentPath(_ sequence: UInt64) -> String { "\(path)/\(WALSegmentHeader.fileName(sequence))" }

    /// The segment files, in sequence order. Files that are not segments are ignored.
    public func segmentFiles() throws(StoreError) -> [(sequence: UInt64, path: String)] {
        try Self.fileNames(in: path).compactMap(WALSegmentHeader.sequence(fromFileName:)).sorted().map { ($0, segmentPath($0)) }
    }

    /// Every segment file, read whole (start-up reads one at a time instead).
    public func readSegments() throws(StoreError) -> [WALRecovery.Segment] {
        var segments: [WALRecovery.Segment] = []
        for (sequence, file) in try segmentFiles() {
            segments.append(WALRecovery.Segment(sequence: sequence, path: file, bytes: try Self.readFile(file)))
        }
        return segments
    }

    /// Carries out the file changes of `plan`: truncations and removals, each made durable.
    public func apply(_ plan: WALRecovery.Plan) throws(StoreError) {
        if let (sequence, offset) = plan.truncate {
            let file = segmentPath(sequence)
            let fd = open(file, O_WRONLY | O_CLOEXEC)
            guard fd >= 0 else { throw .io("cannot open \(file): \(Self.error())") }
            defer { close(fd) }
            guard ftruncate(fd, off_t(offset)) == 0, fsync(fd) == 0 else {
                throw .io("cannot truncate \(file) at \(offset): \(Self.error())")
            }
        }
        for sequence in plan.remove {
            let file = segmentPath(sequence)
            guard unlink(file) == 0 || errno == ENOENT else { throw .io("cannot remove \(file): \(Self.error())") }
        }
        if !plan.remove.isEmpty { try syncDirectory() }
    }

    /// Deletes the segments numbered below `sequence` (a snapshot covers their records); returns how
    /// many bytes they held.
    public func removeSegments(before sequence: UInt64) throws(StoreError) -> Int {
        try removeSegments(try Self.fileNames(in: path).compactMap(WALSegmentHeader.sequence(fromFileName:)).filter { $0 < sequence })
    }

    /// Deletes segments a snapshot covers, oldest first (a crash in between leaves the newest of them,
    /// in sequence, though start-up copes with any of them left: `WALRecovery.Plan.covered`); returns
    /// how many bytes they held.
    public func removeSegments(_ sequences: [UInt64]) throws(StoreError) -> Int {
        var bytes = 0
        for found in sequences.sorted() {
            let file = segmentPath(found)
            var info = stat()
            if stat(file, &info) == 0 { bytes += Int(info.st_size) }
            guard unlink(file) == 0 || errno == ENOENT else { throw .io("cannot remove \(file): \(Self.error())") }
        }
        if !sequences.isEmpty { try syncDirectory() }
        return bytes
    }

    /// Makes the directory's entries (new, renamed or removed files) durable.
    public func syncDirectory() throws(StoreError) { try sync(directory: path) }

    /// Makes the entries of the directory at `path` durable, as this one's are.
    func sync(directory path: String) throws(StoreError) {
        guard directorySync(path) else { throw .io("cannot sync \(path): \(Self.error())") }
    }

    /// Makes the segment's data durable with `syncData` (see `WALWriter.Configuration.syncData`):
    /// records replayed at start-up may be only in the page cache (keyholed, not the machine, stopped
    /// before their sync), and what is served next must not depend on records a power cut would take.
    func syncSegment(_ sequence: UInt64, with syncData: @Sendable (Int32, Range<Int>) -> Bool) throws(StoreError) {
        let file = segmentPath(sequence)
        let fd = open(file, O_WRONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .io("cannot open \(file): \(Self.error())") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0, syncData(fd, 0..<Int(info.st_size)) else {
            throw .io("cannot sync \(file): \(Self.error())")
        }
    }

    /// The names in directory `path` (none when it does not exist).
    static func fileNames(in path: String) throws(StoreError) -> [String] {
        guard let directory = opendir(path) else {
            if errno == ENOENT { return [] }
            throw .io("cannot list \(path): \(error())")
        }
        defer { closedir(directory) }
        var names: [String] = []
        while let entry = readdir(directory) {
            names.append(withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix { $0 != 0 }, as: UTF8.self)
            })
        }
        return names
    }

    /// Writes all of `bytes` at `offset` of `fd`; `false` (with errno set) when a write fails.
    static func writeAll(_ fd: Int32, _ bytes: [UInt8], at offset: Int) -> Bool {
        bytes.withUnsafeBytes { writeAll(fd, $0, at: offset) }
    }

    static func writeAll(_ fd: Int32, _ raw: UnsafeRawBufferPointer, at offset: Int) -> Bool {
        var written = 0
        while written < raw.count {
            let count = pwrite(fd, raw.baseAddress! + written, raw.count - written, off_t(offset + written))
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { return false }
            written += count
        }
        return true
    }

    /// The size of `file`, 0 when it cannot be read (only an estimate depends on it).
    static func fileSize(_ file: String) -> Int {
        var info = stat()
        return stat(file, &info) == 0 ? Int(info.st_size) : 0
    }

    /// The first `count` bytes of `file` (fewer when it is shorter): a segment's header.
    static func readPrefix(_ file: String, count: Int) throws(StoreError) -> [UInt8] {
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .io("cannot open \(file): \(error())") }
        defer { close(fd) }
        var failure: Int32 = 0
        let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            while initialized < buffer.count {
                let read = pread(fd, buffer.baseAddress! + initialized, buffer.count - initialized, off_t(initialized))
                if read < 0 && errno == EINTR { continue }
                if read < 0 { failure = errno }
                guard read > 0 else { return }
                initialized += read
            }
        }
        guard failure == 0 else { throw .io("cannot read \(file): \(String(cString: strerror(failure)))") }
        return bytes
    }

    /// The whole of `file`, read into an array of its size (no regrowing: segments are large).
    static func readFile(_ file: String) throws(StoreError) -> [UInt8] {
        let fd = open(file, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .io("cannot open \(file): \(error())") }
        defer { close(fd) }
        var info = stat()
        guard fstat(fd, &info) == 0 else { throw .io("cannot read \(file): \(error())") }
        var failure: Int32 = 0
        let bytes = [UInt8](unsafeUninitializedCapacity: Int(info.st_size)) { buffer, initialized in
            while initialized < buffer.count {
                let count = read(fd, buffer.baseAddress! + initialized, buffer.count - initialized)
                if count < 0 && errno == EINTR { continue }
                if count < 0 { failure = errno }
                guard count > 0 else { return }
                initialized += count
            }
        }
        guard failure == 0 else { throw .io("cannot read \(file): \(String(cString: strerror(failure)))") }
        return bytes
    }

    static func error() -> String { String(cString: strerror(errno)) }
}

extension WALDirectory {
    /// Keeps a copy of what `plan` (a `--repair`) cuts in `cut`: the tail of the truncated
    /// segment as `<segment>.from-<offset>`, and the removed segments whole.
    func preserveCut(of plan: WALRecovery.Plan, in cut: String) throws(StoreError) {
        if let (sequence, offset) = plan.truncate {
            let bytes = try Self.readFile(segmentPath(sequence))
            try Self.writeFile("\(cut)/\(WALSegmentHeader.fileName(sequence)).from-\(offset)", Array(bytes[min(offset, bytes.count)...]))
        }
        for sequence in plan.remove {
            let name = WALSegmentHeader.fileName(sequence)
            guard rename(segmentPath(sequence), "\(cut)/\(name)") == 0 || errno == ENOENT else {
                throw .io("cannot move \(segmentPath(sequence)) to \(cut): \(Self.error())")
            }
        }
        try syncDirectory()
    }

    /// Creates a new `cut-<now>/` directory for what `--repair` takes out; returns its path.
    func makeCutDirectory(now: Int64) throws(StoreError) -> String {
        var cut = "\(path)/cut-\(now)"
        var attempt = 1
        while mkdir(cut, 0o700) != 0 {
            guard errno == EEXIST, attempt < 100 else { throw .io("cannot create \(cut): \(Self.error())") }
            attempt += 1
            cut = "\(path)/cut-\(now)-\(attempt)"
        }
        return cut
    }

    /// Writes `bytes` to a new file and syncs it.
    static func writeFile(_ file: String, _ bytes: [UInt8]) throws(StoreError) {
        let fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .io("cannot create \(file): \(error())") }
        defer { close(fd) }
        guard writeAll(fd, bytes, at: 0) else { throw .io("cannot write \(file): \(error())") }
        guard fsync(fd) == 0 else { throw .io("cannot sync \(file): \(error())") }
    }
}
