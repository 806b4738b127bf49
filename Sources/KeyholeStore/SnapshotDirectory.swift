#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The `snapshots` directory on disk (SNAPSHOT.md, "Files").
struct SnapshotDirectory: Sendable {
    /// The directory's path.
    let path: String
    /// The state directory it is in.
    let stateDirectory: String
    /// How directories are synced (`WALDirectory.fsyncDirectory`, or a test's failpoint).
    let directorySync: WALDirectory.DirectorySync

    /// The `snapshots` directory under `stateDirectory` (created, mode 0700, by `create()`).
    init(stateDirectory: String, syncDirectory: @escaping WALDirectory.DirectorySync = WALDirectory.fsyncDirectory) {
        self.stateDirectory = stateDirectory
        path = stateDirectory + "/snapshots"
        directorySync = syncDirectory
    }

    /// Creates the directory if it is missing, and makes its entry in the state directory durable
    /// (also when it exists: a crash may have come between an earlier mkdir and that sync).
    func create() throws(StoreError) {
        if mkdir(path, 0o700) != 0 && errno != EEXIST {
            throw .io("cannot create \(path): \(WALDirectory.error())")
        }
        try sync(directory: stateDirectory)
    }

    /// Makes the directory's entries (new, renamed or removed snapshots) durable.
    func syncDirectory() throws(StoreError) { try sync(directory: path) }

    private func sync(directory path: String) throws(StoreError) {
        guard directorySync(path) else { throw .io("cannot sync \(path): \(WALDirectory.error())") }
    }

    /// The path of the snapshot starting at `lsn`.
    func snapshotPath(_ lsn: UInt64) -> String { "\(path)/\(SnapshotHeader.fileName(lsn))" }

    /// The snapshots there, by start LSN, oldest first; `.tmp` files (snapshots never finished) are
    /// deleted on the way.
    func list() throws(StoreError) -> [(lsn: UInt64, path: String)] {
        var found: [(lsn: UInt64, path: String)] = []
        var unfinished: [String] = []
        for name in try WALDirectory.fileNames(in: path) {
            if let lsn = SnapshotHeader.startLSN(fromFileName: name) {
                found.append((lsn, "\(path)/\(name)"))
            } else if name.hasSuffix(".snap.tmp") {
                unfinished.append("\(path)/\(name)")
            }
        }
        for file in unfinished {
            guard unlink(file) == 0 || errno == ENOENT else { throw .io("cannot remove \(file): \(WALDirectory.error())") }
        }
        return found.sorted { $0.lsn < $1.lsn }
    }

    /// Deletes every snapshot older than the one starting at `lsn`; returns how many it deleted.
    @discardableResult
    func removeSnapshots(before lsn: UInt64) throws(StoreError) -> Int {
        let old = try list().filter { $0.lsn < lsn }
        for snapshot in old {
            guard unlink(snapshot.path) == 0 || errno == ENOENT else {
                throw .io("cannot remove \(snapshot.path): \(WALDirectory.error())")
            }
        }
        if !old.isEmpty { try syncDirectory() }
        return old.count
    }
}
