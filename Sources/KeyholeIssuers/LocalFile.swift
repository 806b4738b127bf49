#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Reading a whole local file with a size limit: configuration, key-set files, persisted key sets.
public enum LocalFile {
    /// Why a file could not be read; the description names the file.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// What went wrong.
        public let description: String
        /// The file does not exist (callers that treat absence as "none" test this).
        public let isMissing: Bool
    }

    /// The bytes of `path`, refusing files larger than `maximumBytes` without reading further.
    ///
    /// With `secret` (a private key, a store key) the file must also be a regular file owned by
    /// keyholed's user or root, with no access for "other" and no write access for its group (a group
    /// may read it, as with root:keyhole 0640); a FIFO is refused instead of waited on, and the read
    /// buffer is zeroed afterwards.
    public static func contents(of path: String, maximumBytes: Int, secret: Bool = false) throws(Failure) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC | (secret ? O_NONBLOCK : 0))
        guard fd >= 0 else {
            let error = errno
            throw Failure(description: "cannot read \(path): \(String(cString: strerror(error)))", isMissing: error == ENOENT)
        }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        if secret {
            var status = stat()
            guard fstat(fd, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else {
                throw Failure(description: "\(path) is not a regular file", isMissing: false)
            }
            guard status.st_mode & 0o007 == 0 else {
                throw Failure(
                    description: "\(path) is accessible to every user (mode 0\(String(status.st_mode & 0o777, radix: 8))): a secret key must not be; chmod o-rwx it",
                    isMissing: false)
            }
            // Whoever may write the key may replace it with their own: only its owner, who must be
            // keyholed's user or root.
            guard status.st_mode & 0o020 == 0 else {
                throw Failure(
                    description: "\(path) is writable by its group (mode 0\(String(status.st_mode & 0o777, radix: 8))): a secret key must not be; chmod g-w it",
                    isMissing: false)
            }
            guard status.st_uid == geteuid() || status.st_uid == 0 else {
                throw Failure(
                    description: "\(path) is owned by uid \(status.st_uid): a secret key must belong to keyholed's user (uid \(geteuid())) or root",
                    isMissing: false)
            }
            // Sized at once, so no copy of the secret is left behind in a freed, grown buffer.
            bytes.reserveCapacity(min(Int(status.st_size), maximumBytes) + 1)
        }
        defer {
            if secret { chunk.withUnsafeMutableBytes { wipe($0) } }
        }
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else {
                throw Failure(description: "cannot read \(path): \(String(cString: strerror(errno)))", isMissing: false)
            }
            if count == 0 { return bytes }
            bytes += chunk[..<count]
            guard bytes.count <= maximumBytes else {
                throw Failure(description: "\(path) is larger than \(maximumBytes) bytes", isMissing: false)
            }
        }
    }

    /// Zeroes memory that held a secret, in a way the optimiser may not remove.
    public static func wipe(_ bytes: UnsafeMutableRawBufferPointer) {
        guard let base = bytes.baseAddress else { return }
        #if canImport(Glibc)
        explicit_bzero(base, bytes.count)
        #else
        _ = memset_s(base, bytes.count, 0, bytes.count)
        #endif
    }
}
