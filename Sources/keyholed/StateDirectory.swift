import KeyholeStore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The state directory (log, snapshots, key sets): created owner-only when missing, and durable in
/// its parent once created; refused when it exists with an owner or mode that lets others in.
enum StateDirectory {
    /// Why the state directory cannot be used.
    struct Failure: Error, CustomStringConvertible {
        let description: String
        /// Whether the directory's owner or mode is wrong: an operator must fix it, and restarting
        /// keyholed will not (exit status 78, which the unit does not restart).
        let isConfiguration: Bool
    }

    /// Makes `path` (and missing parents, 0700) unless it exists, then checks it: a directory owned
    /// by keyholed's user, that no other user may use and its group may not write. The log and
    /// snapshots hold every user's record: others reading them is a leak, others writing them is
    /// account takeover.
    static func prepare(_ path: String) throws(Failure) {
        try makeDirectories(path)
        var status = stat()
        guard stat(path, &status) == 0 else {
            throw Failure(description: "cannot read \(path): \(reason())", isConfiguration: false)
        }
        guard status.st_mode & S_IFMT == S_IFDIR else {
            throw Failure(description: "\(path) is not a directory", isConfiguration: true)
        }
        let user = geteuid()
        guard status.st_uid == user else {
            throw Failure(
                description: "\(path) is owned by uid \(status.st_uid), not by keyholed's user (uid \(user)): chown it, or point [storage] dir elsewhere",
                isConfiguration: true)
        }
        let mode = status.st_mode & 0o777
        guard mode & 0o027 == 0 else {
            throw Failure(
                description: "\(path) has mode 0\(String(mode, radix: 8)), which lets other users in or its group write: chmod it to 0700 (0750 at most)",
                isConfiguration: true)
        }
    }

    /// `mkdir -p` with mode 0700, each new directory made durable in its parent (fsync of the
    /// parent): after a power cut, a state directory whose entry was never written would come back
    /// missing with everything in it.
    private static func makeDirectories(_ path: String) throws(Failure) {
        var missing: [String] = []
        var current = path
        while !current.isEmpty, current != "/" {
            var status = stat()
            if stat(current, &status) == 0 { break }
            guard errno == ENOENT else { throw Failure(description: "cannot read \(current): \(reason())", isConfiguration: false) }
            missing.append(current)
            current = parent(of: current)
        }
        for directory in missing.reversed() {
            guard mkdir(directory, 0o700) == 0 || errno == EEXIST else {
                throw Failure(description: "cannot create \(directory): \(reason())", isConfiguration: false)
            }
            let parent = parent(of: directory)
            guard WALDirectory.fsyncDirectory(parent) else {
                throw Failure(description: "cannot sync \(parent): \(reason())", isConfiguration: false)
            }
        }
    }

    /// The directory holding `path` ("." for a relative name without a slash).
    static func parent(of path: String) -> String {
        var trimmed = Substring(path)
        while trimmed.count > 1, trimmed.hasSuffix("/") { trimmed = trimmed.dropLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return "." }
        return slash == trimmed.startIndex ? "/" : String(trimmed[..<slash])
    }

    private static func reason() -> String { String(cString: strerror(errno)) }
}
