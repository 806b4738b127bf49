/// An http or https URL keyholed sends requests to (a key set, a discovery document, Apple's endpoint)
/// or hands on (a redirect URI), parsed into scheme, host, port and the rest (issue 26, finding 4).
///
/// A prefix test passed `http://127.0.0.1:80@evil.example/`, whose host is `evil.example` (the rest
/// is user information). This parser takes a strict subset of RFC 3986 absolute URIs, so that the
/// HTTP client, whatever parser it uses, finds the host this one found:
///
/// - only RFC 3986's characters (no space, no backslash, no `"<>^`{|}`), `%` only before two hex digits;
/// - the scheme `http` or `https`, in any case, then `//`;
/// - no user information (`@` in the authority), for http and https alike;
/// - a host that is a name of letters, digits, `-` and `.`, or a bracketed IPv6 address of hex digits,
///   `:` and `.` (no zone), never empty, never percent-encoded;
/// - a port of 1 to 65535 when a `:` is given (an empty port is refused);
/// - no fragment (`#`), and `[` `]` only around an IPv6 host.
///
/// Loopback is decided on the parsed host, exactly: `localhost`, a dotted-decimal IPv4 address in
/// 127.0.0.0/8 (four decimal parts, no leading zeros), or `::1`. Any other spelling of a loopback
/// address (`127.1`, `0x7f.0.0.1`, `[0:0:0:0:0:0:0:1]`) is not loopback here: it fails closed.
public struct RemoteURL: Sendable, Equatable, CustomStringConvertible {
    /// The schemes keyholed speaks.
    public enum Scheme: String, Sendable {
        case http
        case https
    }

    /// Why a URL was refused: says what is wrong without quoting more than a prefix of it.
    public struct Refusal: Error, Sendable, CustomStringConvertible {
        /// What is wrong.
        public let description: String
    }

    /// The longest URL accepted, in bytes.
    public static let maximumBytes = 4096

    /// The scheme, lowercased.
    public let scheme: Scheme
    /// The host, lowercased; an IPv6 address without its brackets.
    public let host: String
    /// The port given, if any.
    public let port: Int?
    /// Everything after the authority: the path and the query, possibly empty.
    public let pathAndQuery: String
    /// The URL as given.
    public let text: String

    /// The URL as given.
    public var description: String { text }

    /// Whether the host is this machine's: `localhost`, 127.0.0.0/8 in dotted decimal, or `::1`.
    public var isLoopback: Bool {
        host == "localhost" || host == "::1" || Self.isLoopbackIPv4(host)
    }

    /// Whether keyholed may send a request to it: https anywhere, plain http only to loopback (tests).
    public var isPermitted: Bool {
        scheme == .https || isLoopback
    }

    /// Parses `text`.
    ///
    /// - Throws: a `Refusal` naming the first thing wrong.
    public init(_ text: String) throws(Refusal) {
        let bytes = Array(text.utf8)
        guard bytes.count <= Self.maximumBytes else {
            throw Refusal(description: "URL is longer than \(Self.maximumBytes) bytes")
        }
        try Self.checkCharacters(bytes)
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")),
            let scheme = Scheme(rawValue: String(decoding: bytes[..<colon], as: UTF8.self).lowercased()),
            bytes[(colon + 1)...].starts(with: "//".utf8)
        else {
            throw Refusal(description: "URL must begin with https:// or http://")
        }
        let authorityStart = colon + 3
        let authorityEnd = bytes[authorityStart...].firstIndex { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") } ?? bytes.endIndex
        let authority = bytes[authorityStart..<authorityEnd]
        guard !authority.contains(UInt8(ascii: "@")) else {
            throw Refusal(description: "URL must not carry user information (user@ or user:password@ before the host)")
        }
        let (host, port) = try Self.hostAndPort(authority)
        let rest = bytes[authorityEnd...]
        guard !rest.contains(UInt8(ascii: "[")), !rest.contains(UInt8(ascii: "]")) else {
            throw Refusal(description: "URL has [ or ] outside an IPv6 host")
        }
        self.scheme = scheme
        self.host = host
        self.port = port
        self.pathAndQuery = String(decoding: rest, as: UTF8.self)
        self.text = text
    }

    /// Whether `text` parses and `isPermitted`.
    public static func permits(_ text: String) -> Bool {
        (try? RemoteURL(text))?.isPermitted == true
    }

    /// RFC 3986's characters only: unreserved, reserved and `%` with two hex digits; no fragment.
    private static func checkCharacters(_ bytes: [UInt8]) throws(Refusal) {
        var index = 0
        while index < bytes.count {
            let byte = bytes[index]
            if byte == UInt8(ascii: "%") {
                guard index + 2 < bytes.count, isHexDigit(bytes[index + 1]), isHexDigit(bytes[index + 2]) else {
                    throw Refusal(description: "URL has a % not followed by two hex digits")
                }
                index += 3
                continue
            }
            guard byte < 0x80, allowed[Int(byte)] else {
                throw Refusal(description: "URL has a character that is not allowed in a URL (byte \(byte) at \(index))")
            }
            guard byte != UInt8(ascii: "#") else {
                throw Refusal(description: "URL must not have a fragment (#)")
            }
            index += 1
        }
    }

    /// Letters, digits, `-._~`, `:/?#[]@`, `!$&'()*+,;=`.
    private static let allowed: [Bool] = (0..<128).map { value in
        let byte = UInt8(value)
        return isAlphanumeric(byte) || "-._~:/?#[]@!$&'()*+,;=".utf8.contains(byte)
    }

    private static func hostAndPort(_ authority: ArraySlice<UInt8>) throws(Refusal) -> (String, Int?) {
        let hostEnd: Int
        let host: String
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else {
                throw Refusal(description: "URL has an IPv6 host without its closing ]")
            }
            let address = authority[(authority.startIndex + 1)..<close]
            guard !address.isEmpty, address.contains(UInt8(ascii: ":")),
                address.allSatisfy({ isHexDigit($0) || $0 == UInt8(ascii: ":") || $0 == UInt8(ascii: ".") })
            else {
                throw Refusal(description: "URL has an IPv6 host that is not an address (hex digits, : and . only, no zone)")
            }
            host = String(decoding: address, as: UTF8.self).lowercased()
            hostEnd = close + 1
        } else {
            hostEnd = authority.firstIndex(of: UInt8(ascii: ":")) ?? authority.endIndex
            let name = authority[..<hostEnd]
            guard !name.isEmpty else { throw Refusal(description: "URL has no host") }
            guard name.allSatisfy({ isAlphanumeric($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") }) else {
                throw Refusal(description: "URL has a host that is not a name of letters, digits, - and ., nor an IP address")
            }
            host = String(decoding: name, as: UTF8.self).lowercased()
        }
        let rest = authority[hostEnd...]
        guard let first = rest.first else { return (host, nil) }
        let digits = rest.dropFirst()
        guard first == UInt8(ascii: ":"), !digits.isEmpty, digits.count <= 5, digits.allSatisfy(isDigit),
            let port = Int(String(decoding: digits, as: UTF8.self)), (1...65535).contains(port)
        else {
            throw Refusal(description: "URL has a port that is not a number from 1 to 65535")
        }
        return (host, port)
    }

    /// Four decimal parts of 0 to 255 without leading zeros, the first 127.
    private static func isLoopbackIPv4(_ host: String) -> Bool {
        let parts = host.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard parts.count == 4 else { return false }
        for part in parts {
            guard !part.isEmpty, part.count <= 3, part.allSatisfy(isDigit), part.count == 1 || part.first != UInt8(ascii: "0"),
                let value = Int(String(decoding: part, as: UTF8.self)), value <= 255
            else { return false }
        }
        return parts[0].elementsEqual("127".utf8)
    }

    private static func isDigit(_ byte: UInt8) -> Bool {
        byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9")
    }

    private static func isHexDigit(_ byte: UInt8) -> Bool {
        isDigit(byte) || (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "f"))
    }

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        isDigit(byte) || (byte | 0x20 >= UInt8(ascii: "a") && byte | 0x20 <= UInt8(ascii: "z"))
    }
}
