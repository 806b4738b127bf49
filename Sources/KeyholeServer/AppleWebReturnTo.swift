/// Where a browser may be sent once signed in on the web (APPLE_WEB.md, `apple.authorize`'s
/// `return_to`): a path on the site, or a URL on one of the configured origins. Anything else is
/// refused, so that keyholed is never an open redirect. Checked by bytes, before a record is kept.
///
/// Browsers are lenient in ways an attacker uses: they drop tabs and newlines inside a URL, read a
/// backslash as a slash, and take `//host` as another host. So only printable ASCII without spaces
/// or backslashes is taken; a path must not begin with two slashes; a URL must begin with an origin
/// exactly and then end, or go on with `/`, `?` or `#` (not `@`, `.` or `:`, which would make the
/// origin's text a user name or another host's prefix).
struct AppleWebReturnTo: Sendable, Equatable {
    /// The longest `return_to` taken.
    static let maximumBytes = 2048

    /// The origins a URL may name, each as `origin(_:)` made it: lower case, no trailing slash.
    let origins: [String]

    /// Takes origins already made by `origin(_:)`.
    init(origins: [String]) {
        self.origins = origins
    }

    /// A configured origin in its one form: `https://host` or `https://host:port` (`http` only for a
    /// loopback host, for tests), scheme and host lower-cased, no trailing slash. `nil` for anything
    /// else (a path, a query, user info, a wildcard), which the configuration then refuses.
    static func origin(_ text: String) -> String? {
        let lowered = String(decoding: text.utf8.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }, as: UTF8.self)
        let trimmed = lowered.hasSuffix("/") ? String(lowered.dropLast()) : lowered
        let rest: Substring
        let plain: Bool
        if trimmed.hasPrefix("https://") {
            (rest, plain) = (trimmed.dropFirst(8), false)
        } else if trimmed.hasPrefix("http://") {
            (rest, plain) = (trimmed.dropFirst(7), true)
        } else {
            return nil
        }
        guard !rest.isEmpty, rest.utf8.allSatisfy(Self.isHostByte) else { return nil }
        let host: Substring
        let port: Substring?
        if rest.hasPrefix("[") {
            // An IPv6 literal: only the loopback one.
            guard let close = rest.firstIndex(of: "]") else { return nil }
            host = rest[...close]
            let after = rest[rest.index(after: close)...]
            guard host == "[::1]", after.isEmpty || after.hasPrefix(":") else { return nil }
            port = after.isEmpty ? nil : after.dropFirst()
        } else {
            let parts = rest.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2, !parts[0].isEmpty, !parts[0].contains("["), !parts[0].contains("]") else { return nil }
            host = parts[0]
            port = parts.count == 2 ? parts[1] : nil
        }
        if let port, !Self.isPort(port) { return nil }
        guard !plain || host == "localhost" || host == "127.0.0.1" || host == "[::1]" else { return nil }
        return trimmed
    }

    /// Why `text` may not be a `return_to`, or `nil` when it may.
    func refusal(_ text: String) -> String? {
        let bytes = Array(text.utf8)
        guard !bytes.isEmpty, bytes.count <= Self.maximumBytes else {
            return "return_to must be 1 to \(Self.maximumBytes) bytes"
        }
        guard bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\\") }) else {
            return "return_to may hold only printable ASCII, without spaces or backslashes (percent-encode the rest)"
        }
        if bytes[0] == UInt8(ascii: "/") {
            guard bytes.count == 1 || bytes[1] != UInt8(ascii: "/") else {
                return "return_to must be a path on this site (one leading slash) or a URL on a configured origin"
            }
            return nil
        }
        let lowered = bytes.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }
        for origin in origins {
            let prefix = Array(origin.utf8)
            guard lowered.count >= prefix.count, lowered[..<prefix.count].elementsEqual(prefix) else { continue }
            if lowered.count == prefix.count { return nil }
            switch lowered[prefix.count] {
            case UInt8(ascii: "/"), UInt8(ascii: "?"), UInt8(ascii: "#"): return nil
            default: continue
            }
        }
        return "return_to must be a path on this site (one leading slash) or a URL on an origin of [apple] web_return_origins"
    }

    private static func isHostByte(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "."),
            UInt8(ascii: ":"), UInt8(ascii: "["), UInt8(ascii: "]"):
            true
        default:
            false
        }
    }

    private static func isPort(_ text: Substring) -> Bool {
        guard (1...5).contains(text.utf8.count), text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let port = Int(text) else { return false }
        return (1...65535).contains(port)
    }
}
