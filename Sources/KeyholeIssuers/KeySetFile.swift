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
        let bytes: [UInt8]
        do {
            bytes = try LocalFile.contents(of: path, maximumBytes: maximumBytes)
        } catch {
            throw Failure(description: error.description)
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
