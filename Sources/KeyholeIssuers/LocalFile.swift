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
    public static func contents(of path: String, maximumBytes: Int) throws(Failure) -> [UInt8] {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            let error = errno
            throw Failure(description: "cannot read \(path): \(String(cString: strerror(error)))", isMissing: error == ENOENT)
        }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
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
}
