#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import KeyholeJOSE

/// A key set read from a local file (an issuer's `jwks_uri` as a path, for air-gapped hosts).
public enum KeySetFile {
    /// The largest key-set document read, as for a fetched one.
    public static let maximumBytes = 1 << 20

    /// Why a key-set file could not be used.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// What went wrong, naming the file.
        public let description: String
    }

    /// Reads and parses the key set at `path`.
    public static func load(_ path: String) throws(Failure) -> JWKSet {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw Failure(description: "cannot read \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { throw Failure(description: "cannot read \(path): \(String(cString: strerror(errno)))") }
            if count == 0 { break }
            bytes += chunk[..<count]
            guard bytes.count <= maximumBytes else { throw Failure(description: "\(path) is larger than \(maximumBytes) bytes") }
        }
        let set: JWKSet
        do {
            set = try JWKSet(json: bytes)
        } catch {
            throw Failure(description: "\(path): \(error.message)")
        }
        guard !set.keys.isEmpty else {
            throw Failure(description: "\(path) holds no usable key (\(set.skipped.joined(separator: "; ")))")
        }
        return set
    }
}
