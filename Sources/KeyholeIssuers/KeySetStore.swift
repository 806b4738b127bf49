#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import KeyholeJOSE
import KeyholeProtocol
import NIOCore

/// Each issuer's last good key set on disk, as KeySetStore.md describes, so that a restart during an
/// issuer outage still verifies.
public struct KeySetStore: Sendable {
    /// The `jwks` directory under the state directory.
    public let directory: String

    /// The largest file read.
    public static let maximumBytes = 2 << 20

    /// Why a persisted key set was not used or not written.
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// What went wrong, naming the file.
        public let description: String
    }

    /// A key set as loaded from disk.
    public struct Entry: Sendable {
        /// The parsed keys.
        public let keys: JWKSet
        /// The key-set document, re-serialised.
        public let document: [UInt8]
        /// When it was fetched and when it expires, in seconds since 1970.
        public let fetchedAt: Double
        public let expiresAt: Double
    }

    /// The store under `stateDirectory`; the `jwks` directory is created (mode 0700) on first save.
    public init(stateDirectory: String) {
        directory = stateDirectory + "/jwks"
    }

    private func path(_ issuer: IssuerConfiguration) -> String { "\(directory)/\(issuer.name).json" }

    /// Writes `document` for `issuer` atomically and durably (temp file, fsync, rename, fsync directory).
    public func save(_ document: [UInt8], for issuer: IssuerConfiguration, fetchedAt: Double, expiresAt: Double) throws(Failure) {
        guard case .object(let jwks) = (try? JSONValue.parse(ByteBuffer(bytes: document))) ?? .null else {
            throw Failure(description: "key set of issuer '\(issuer.name)' is not a JSON object; not saved")
        }
        let record: JSONValue = [
            "format": 1, "issuer": .string(issuer.name), "iss": .string(issuer.issuer),
            "source": .string(issuer.keySet.description),
            "fetched_at": .double(fetchedAt), "expires_at": .double(expiresAt), "jwks": .object(jwks),
        ]
        var bytes = ByteBuffer()
        record.write(to: &bytes)
        if mkdir(directory, 0o700) != 0 && errno != EEXIST {
            throw Failure(description: "cannot create \(directory): \(String(cString: strerror(errno)))")
        }
        let final = path(issuer)
        let temporary = final + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw Failure(description: "cannot write \(temporary): \(String(cString: strerror(errno)))") }
        var written = 0
        let total = bytes.readableBytes
        let ok = bytes.withUnsafeReadableBytes { raw -> Bool in
            while written < total {
                let count = write(fd, raw.baseAddress! + written, total - written)
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { return false }
                written += count
            }
            return fsync(fd) == 0
        }
        let error = errno
        close(fd)
        guard ok else {
            unlink(temporary)
            throw Failure(description: "cannot write \(temporary): \(String(cString: strerror(error)))")
        }
        guard rename(temporary, final) == 0 else {
            let error = errno
            unlink(temporary)
            throw Failure(description: "cannot rename \(temporary): \(String(cString: strerror(error)))")
        }
        // The rename is durable only once the directory entry is.
        let directoryFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard directoryFD >= 0 else { throw Failure(description: "cannot open \(directory) to sync it") }
        defer { close(directoryFD) }
        guard fsync(directoryFD) == 0 else { throw Failure(description: "cannot sync \(directory)") }
    }

    /// The persisted key set of `issuer`, or `nil` when there is none.
    ///
    /// - Throws: when a file exists but cannot be used (the caller warns and fetches as if there were none).
    public func load(_ issuer: IssuerConfiguration) throws(Failure) -> Entry? {
        let file = path(issuer)
        let bytes: [UInt8]
        do {
            bytes = try LocalFile.contents(of: file, maximumBytes: Self.maximumBytes)
        } catch {
            if error.isMissing { return nil }
            throw Failure(description: error.description)
        }
        guard case .object(let record)? = try? JSONValue.parse(ByteBuffer(bytes: bytes)), record["format"] == 1 else {
            throw Failure(description: "\(file) is not a format-1 key-set file")
        }
        guard record["issuer"] == .string(issuer.name), record["iss"] == .string(issuer.issuer),
            record["source"] == .string(issuer.keySet.description)
        else {
            throw Failure(description: "\(file) belongs to another issuer configuration")
        }
        guard let fetchedAt = Self.seconds(record["fetched_at"]), let expiresAt = Self.seconds(record["expires_at"]),
            case .object(let jwks)? = record["jwks"]
        else { throw Failure(description: "\(file) lacks fetched_at, expires_at or jwks") }
        var document = ByteBuffer()
        JSONValue.object(jwks).write(to: &document)
        let documentBytes = Array(document.readableBytesView)
        do {
            return Entry(keys: try JWKSet(json: documentBytes), document: documentBytes, fetchedAt: fetchedAt, expiresAt: expiresAt)
        } catch {
            throw Failure(description: "\(file): \(error.message)")
        }
    }

    private static func seconds(_ value: JSONValue?) -> Double? {
        switch value {
        case .double(let seconds)?: seconds.isFinite ? seconds : nil
        case .int(let seconds)?: Double(seconds)
        default: nil
        }
    }
}
