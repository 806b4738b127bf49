import KeyholeIssuers
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
        keys.signingKey = try loadSigningKey(credentialsDirectory: credentialsDirectory)
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

    /// Reads the team's private key (`nil` without one): at start-up, and again at each reload, which
    /// is how a rotated `.p8` key is put in use.
    func loadSigningKey(credentialsDirectory: String?) throws(ConfigError) -> SigningKey? {
        guard let privateKey else { return nil }
        var bytes = try Self.readKey(privateKey, key: "apple.private_key", credentialsDirectory: credentialsDirectory)
        defer { Self.wipe(&bytes) }
        do {
            return try SigningKey(pem: bytes)
        } catch {
            throw ConfigError(key: "apple.private_key", line: nil,
                message: "\(privateKey) is not a usable P-256 private key (Apple's .p8 file, PEM): \(error.message)")
        }
    }

    /// The bytes of a key file (`LocalFile`'s checks for secrets), at most 64 KiB.
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
            guard access(path, F_OK) == 0 else {
                throw ConfigError(key: key, line: nil,
                    message: "\(source) is not in $CREDENTIALS_DIRECTORY: put the file in the directory the unit's LoadCredential= names (the packaged unit: /etc/keyhole/credentials/\(name.hasPrefix("keyhole_") ? String(name.dropFirst(8)) : "…")), then restart")
            }
        }
        let bytes: [UInt8]
        do {
            bytes = try LocalFile.contents(of: path, maximumBytes: 64 << 10, secret: true)
        } catch {
            throw ConfigError(key: key, line: nil, message: error.description)
        }
        guard !bytes.isEmpty else { throw ConfigError(key: key, line: nil, message: "\(path) is empty") }
        return bytes
    }

    /// Overwrites a copy of key material that is no longer needed.
    static func wipe(_ bytes: inout [UInt8]) {
        bytes.withUnsafeMutableBytes { LocalFile.wipe($0) }
    }
}
