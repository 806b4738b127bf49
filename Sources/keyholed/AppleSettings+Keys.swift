import KeyholeJOSE

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension AppleSettings {
    /// The keys `[apple]` names, read at start-up.
    struct Keys {
        /// The team's `.p8` key, signing client secrets.
        var signingKey: SigningKey?
        /// The store key, sealing refresh tokens.
        var sealingKey: SealingKey?
    }

    /// Reads the private key and the store key. Any problem is a configuration error naming the key
    /// and its file: keyholed exits 78 rather than run without what its configuration asks for.
    func loadKeys(credentialsDirectory: String?) throws(ConfigError) -> Keys {
        var keys = Keys()
        if let privateKey {
            var bytes = try Self.readKey(privateKey, key: "apple.private_key", credentialsDirectory: credentialsDirectory)
            defer { Self.wipe(&bytes) }
            do {
                keys.signingKey = try SigningKey(pem: bytes)
            } catch {
                throw ConfigError(key: "apple.private_key", line: nil,
                    message: "\(privateKey) is not a usable P-256 private key (Apple's .p8 file, PEM): \(error.message)")
            }
        }
        if let storeKey {
            var bytes = try Self.readKey(storeKey, key: "apple.store_key", credentialsDirectory: credentialsDirectory)
            defer { Self.wipe(&bytes) }
            guard var raw = Self.storeKeyBytes(bytes) else {
                throw ConfigError(key: "apple.store_key", line: nil,
                    message: "\(storeKey) must hold exactly 32 bytes, or 64 hexadecimal digits (`keyhole keygen FILE` writes one)")
            }
            defer { Self.wipe(&raw) }
            do {
                keys.sealingKey = try SealingKey(bytes: raw)
            } catch {
                throw ConfigError(key: "apple.store_key", line: nil, message: "\(storeKey) is not usable: \(error.message)")
            }
        }
        return keys
    }

    /// 32 raw bytes, or 64 hex digits with an optional final newline.
    static func storeKeyBytes(_ bytes: [UInt8]) -> [UInt8]? {
        if bytes.count == SealingKey.keyBytes { return bytes }
        var text = bytes[...]
        if text.last == UInt8(ascii: "\n") { text = text.dropLast() }
        guard text.count == 2 * SealingKey.keyBytes else { return nil }
        var raw: [UInt8] = []
        raw.reserveCapacity(SealingKey.keyBytes)
        var index = text.startIndex
        while index < text.endIndex {
            guard let high = hexValue(text[index]), let low = hexValue(text[index + 1]) else { return nil }
            raw.append(high << 4 | low)
            index += 2
        }
        return raw
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    /// The bytes of a key file: a regular file of at most 64 KiB with no access for "other" (a group
    /// may read it, as with root:keyhole 0640 under /etc/keyhole).
    static func readKey(_ source: KeySource, key: String, credentialsDirectory: String?) throws(ConfigError) -> [UInt8] {
        let path: String
        switch source {
        case .file(let file):
            path = file
        case .credential(let name):
            guard let directory = credentialsDirectory, !directory.isEmpty else {
                throw ConfigError(key: key, line: nil,
                    message: "\(source) needs systemd's LoadCredential= ($CREDENTIALS_DIRECTORY is not set); use a _file key otherwise")
            }
            path = directory + "/" + name
        }
        // O_NONBLOCK: a FIFO at the path must not hang start-up before it is found not to be a file.
        let descriptor = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard descriptor >= 0 else {
            let reason = String(cString: strerror(errno))
            throw ConfigError(key: key, line: nil, message: "cannot read \(path): \(reason)")
        }
        defer { close(descriptor) }
        var status = stat()
        guard fstat(descriptor, &status) == 0, (status.st_mode & S_IFMT) == S_IFREG else {
            throw ConfigError(key: key, line: nil, message: "\(path) is not a regular file")
        }
        guard status.st_mode & 0o007 == 0 else {
            throw ConfigError(key: key, line: nil,
                message: "\(path) is accessible to every user (mode 0\(String(status.st_mode & 0o777, radix: 8))): a secret key must not be; chmod o-rwx it")
        }
        let limit = 64 << 10
        guard status.st_size <= limit else { throw ConfigError(key: key, line: nil, message: "\(path) is larger than 64 KiB: not a key") }
        var bytes = [UInt8](repeating: 0, count: limit + 1)
        var count = 0
        while count < bytes.count {
            let got = bytes.withUnsafeMutableBytes { read(descriptor, $0.baseAddress! + count, $0.count - count) }
            if got < 0 && errno == EINTR { continue }
            guard got >= 0 else {
                throw ConfigError(key: key, line: nil, message: "cannot read \(path): \(String(cString: strerror(errno)))")
            }
            if got == 0 { break }
            count += got
        }
        guard count <= limit else { throw ConfigError(key: key, line: nil, message: "\(path) is larger than 64 KiB: not a key") }
        guard count > 0 else { throw ConfigError(key: key, line: nil, message: "\(path) is empty") }
        let key = Array(bytes[..<count])
        wipe(&bytes)
        return key
    }

    /// Overwrites a copy of key material that is no longer needed.
    static func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { buffer in
            guard let base = buffer.baseAddress else { return }
            zeroise(base, buffer.count)
        }
    }
}

/// Zeroes memory in a way the optimiser may not remove.
private func zeroise(_ pointer: UnsafeMutableRawPointer, _ count: Int) {
    #if canImport(Glibc)
    explicit_bzero(pointer, count)
    #else
    memset_s(pointer, count, 0, count)
    #endif
}
