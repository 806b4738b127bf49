import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The Unix socket file keyholed listens on: checked before binding, removed after a clean stop.
package struct SocketFile {
    package let path: String
    /// The inode created by our bind, so that we never remove a file someone else put there since.
    private(set) var inode: ino_t?
    /// The group owning that inode, read with the same lstat: the default policy's clients.
    package private(set) var group: UInt32?

    package init(path: String) { self.path = path }

    /// `sun_path` holds 108 bytes including the terminating NUL.
    static let maxPathBytes = 107

    /// Makes the path free for binding: refuses when another process listens there or the file is not a
    /// socket, removes a socket nobody answers on (left behind by a process that died).
    /// Returns `true` when a stale socket was removed.
    package func prepare() throws(ServerError) -> Bool {
        guard !path.isEmpty, path.utf8.count <= Self.maxPathBytes else {
            throw .socketPath("socket path must be 1 to \(Self.maxPathBytes) bytes long: \(path)")
        }
        var info = stat()
        guard lstat(path, &info) == 0 else {
            if errno == ENOENT { return false }
            throw .socketPath("cannot inspect \(path): \(String(cString: strerror(errno)))")
        }
        guard info.st_mode & S_IFMT == S_IFSOCK else { throw .notASocket(path) }
        switch Self.probe(path) {
        case 0, EAGAIN:
            // EAGAIN: a listener whose backlog is full; it is alive all the same.
            throw .socketInUse(path)
        case ECONNREFUSED:
            guard unlink(path) == 0 || errno == ENOENT else {
                throw .socketPath("cannot remove stale socket \(path): \(String(cString: strerror(errno)))")
            }
            return true
        case let error:
            throw .socketPath("cannot probe existing socket \(path): \(String(cString: strerror(error)))")
        }
    }

    /// Connects to `path`: 0 when something accepts, else the errno.
    private static func probe(_ path: String) -> Int32 {
        // Non-blocking, so a live server with a full backlog answers EAGAIN instead of hanging start-up.
        let fd = makeSocket()
        guard fd >= 0 else { return errno }
        defer { close(fd) }
        let result = withAddress(path) { connect(fd, $0, $1) }
        return result == 0 ? 0 : errno
    }

    /// A non-blocking, close-on-exec Unix stream socket; -1 with errno set when none could be made.
    private static func makeSocket() -> CInt {
        #if canImport(Glibc)
        socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
        #else
        socket(AF_UNIX, SOCK_STREAM, 0)
        #endif
    }

    /// Calls `body` with `path` as a Unix socket address and its length.
    private static func withAddress<Result>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) -> Result) -> Result {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            // One byte stays for the NUL (sun_path is 108 bytes on Linux, 104 on Darwin).
            raw.copyBytes(from: path.utf8.prefix(raw.count - 1))
        }
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// Creates, binds and listens on the socket, its file's mode exactly `mode` from its creation: no
    /// window with other permissions, and no chmod by path (which would follow a symlink swapped in).
    /// Returns the listening descriptor, for NIO to adopt.
    ///
    /// The mode comes from the umask, which is process-wide. It is changed and restored around the
    /// bind(2) call alone, synchronously and under a lock: two binds at once (servers started in one
    /// process, as the tests do) once left it at the other's value for good when it was held across
    /// an await. A file another thread creates in that moment gets this umask, which may be wider than
    /// the usual one for the group; every file and directory keyholed creates is opened with mode 0600
    /// or 0700, which no umask widens.
    ///
    /// With `group`, the file is given that group before it listens (keyholed's user must be a member,
    /// or root): a connection is never judged by a group the file had for a moment.
    package mutating func bind(mode: UInt32, group wanted: UInt32? = nil, backlog: Int) throws(ServerError) -> CInt {
        let fd = Self.makeSocket()
        guard fd >= 0 else { throw .bindFailed(path, "socket: \(String(cString: strerror(errno)))") }
        let failure: Int32 = Self.umaskLock.withLock { _ in
            let previous = umask(mode_t(~mode & 0o777))
            defer { umask(previous) }
            return Self.withAddress(path) { systemBind(fd, $0, $1) } == 0 ? 0 : errno
        }
        guard failure == 0 else {
            close(fd)
            throw .bindFailed(path, String(cString: strerror(failure)))
        }
        var info = stat()
        guard lstat(path, &info) == 0 else {
            // Without the inode the file could not be told from one put there later: not served.
            let reason = String(cString: strerror(errno))
            close(fd)
            throw .bindFailed(path, "lstat after bind: \(reason)")
        }
        if let wanted, UInt32(info.st_gid) != wanted {
            // The path is ours for this moment (a directory keyholed owns): lchown never follows a
            // link, and the inode is checked again after it.
            let inode = info.st_ino
            guard lchown(path, uid_t.max, gid_t(wanted)) == 0, lstat(path, &info) == 0, info.st_ino == inode else {
                let reason = String(cString: strerror(errno))
                close(fd)
                unlink(path)
                throw .bindFailed(path, "giving the socket group \(wanted): \(reason)")
            }
        }
        inode = info.st_ino
        group = UInt32(info.st_gid)
        guard listen(fd, CInt(clamping: backlog)) == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            remove()
            throw .bindFailed(path, "listen: \(reason)")
        }
        return fd
    }

    private static let umaskLock = Mutex(())
}

// bind(2), named apart from `SocketFile.bind`, which would shadow it inside the type.
#if canImport(Glibc)
private let systemBind = Glibc.bind
#elseif canImport(Darwin)
private let systemBind = Darwin.bind
#endif

extension SocketFile {
    /// The group owning the socket file `descriptor` (one systemd passed) listens on, if it is bound
    /// to a path: read with lstat, and only from a socket file, so that a symlink or another file put
    /// at the path does not lend its group. (The file's inode cannot be checked against the
    /// descriptor: fstat of a socket describes the socket, not the file.)
    package static func group(ofListening descriptor: CInt) -> UInt32? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard named == 0, address.sun_family == sa_family_t(AF_UNIX) else { return nil }
        let path = withUnsafeBytes(of: address.sun_path) { bytes in
            String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
        guard path.hasPrefix("/") else { return nil }
        var info = stat()
        guard lstat(path, &info) == 0, info.st_mode & S_IFMT == S_IFSOCK else { return nil }
        return UInt32(info.st_gid)
    }

    /// Removes the socket file if it is still the one we created.
    package func remove() {
        var info = stat()
        guard let inode, lstat(path, &info) == 0, info.st_ino == inode else { return }
        unlink(path)
    }
}
