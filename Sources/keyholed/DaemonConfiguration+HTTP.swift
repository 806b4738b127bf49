import KeyholeHTTP
import KeyholeServer
import NIOCore

extension DaemonConfiguration {
    static let httpKeys: Set<String> = [
        "socket", "socket_mode", "socket_group", "listen", "allow_non_loopback", "listen_allow", "cookie",
        "max_connections", "idle_timeout", "head_timeout", "web", "web_error_path",
    ]

    /// `[http]` (Sources/KeyholeHTTP/HTTP.md); `nil` without the section: the listener is off.
    static func http(_ file: ConfigFile) throws(ConfigError) -> HTTPListener.Configuration? {
        guard let section = try file.section("http", keys: httpKeys) else { return nil }
        var http = HTTPListener.Configuration()
        var path = "/run/keyhole/http.sock"
        if let socket = try section.string("socket") {
            try checkPath(socket, key: "http.socket", line: file.line(of: "socket", in: "http"), socket: true)
            path = socket
        }
        let mode = try section.mode("socket_mode") ?? 0o660
        let group = try socketGroup(section)
        http.socket = .path(path, mode: mode, group: group)
        if let listen = try section.string("listen") {
            http.listen = try address(listen, allowNonLoopback: try section.bool("allow_non_loopback") ?? false, section: section)
        } else if try section.bool("allow_non_loopback") != nil {
            throw section.error("allow_non_loopback", "applies only with listen")
        }
        if let names = try section.stringArray("listen_allow") {
            var groups: AccessPolicy.Groups = []
            for name in names {
                guard let group = AccessPolicy.Group(rawValue: name), AccessPolicy.Groups.proxies.contains(AccessPolicy.Groups(group)) else {
                    throw section.error("listen_allow", "'\(name)' is not a group the HTTP listener serves: authz, health or metrics")
                }
                groups.insert(AccessPolicy.Groups(group))
            }
            http.listenAllow = groups
        }
        if let cookie = try section.string("cookie") {
            // RFC 6265's cookie-name is a token: no separators, spaces or controls.
            let separators = Set("()<>@,;:\\\"/[]?={} \t".utf8)
            guard !cookie.isEmpty, cookie.utf8.count <= 64, cookie.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F && !separators.contains($0) }) else {
                throw section.error("cookie", "must be a cookie name: 1 to 64 visible ASCII characters, none of ()<>@,;:\\\"/[]?={}")
            }
            http.cookieName = cookie
        }
        if let count = try section.integer("max_connections", in: maxConnectionsRange) { http.maxConnections = count }
        if let timeout = try section.duration("idle_timeout", in: timeoutRange) { http.idleTimeout = timeout }
        if let timeout = try section.duration("head_timeout", in: .milliseconds(100)...(.minutes(10))) { http.headTimeout = timeout }
        http.web = try section.bool("web") ?? false
        if let path = try section.string("web_error_path") {
            // Sent as a redirect's Location: a path on the site, and nothing a browser would read as
            // another host or a header's end.
            let bytes = Array(path.utf8)
            guard bytes.first == UInt8(ascii: "/"), bytes.count < 2 || bytes[1] != UInt8(ascii: "/"), bytes.count <= 1024,
                bytes.allSatisfy({ $0 > 0x20 && $0 < 0x7F && $0 != UInt8(ascii: "\\") && $0 != UInt8(ascii: "#") })
            else {
                throw section.error("web_error_path", "must be a path on the site: one leading /, printable ASCII without spaces, backslashes or #")
            }
            http.webErrorPath = path
        }
        return http
    }

    private static func socketGroup(_ section: ConfigFile.Section) throws(ConfigError) -> UInt32? {
        guard let value = section.table["socket_group"] else { return nil }
        if let number = value.int {
            guard (0..<Int(UInt32.max)).contains(number) else { throw section.error("socket_group", "\(number) is not a group id") }
            return UInt32(number)
        }
        guard let name = value.string else { throw section.error("socket_group", "must be a group name or number") }
        guard let id = groupID(named: name) else { throw section.error("socket_group", "no group named '\(name)' on this host") }
        return id
    }

    /// `127.0.0.1:9180`, `[::1]:9180`; a non-loopback address only with `allow_non_loopback`.
    private static func address(_ text: String, allowNonLoopback: Bool, section: ConfigFile.Section) throws(ConfigError) -> HTTPListener.Address {
        let host: Substring
        let portText: Substring
        if text.hasPrefix("["), let close = text.firstIndex(of: "]"), text[text.index(after: close)...].hasPrefix(":") {
            host = text[text.index(after: text.startIndex)..<close]
            portText = text[text.index(close, offsetBy: 2)...]
        } else if let colon = text.lastIndex(of: ":"), !text[..<colon].contains(":") {
            host = text[..<colon]
            portText = text[text.index(after: colon)...]
        } else {
            throw section.error("listen", "must be an address and port: \"127.0.0.1:9180\" or \"[::1]:9180\"")
        }
        guard let port = Int(portText), (1...65_535).contains(port) else {
            throw section.error("listen", "the port must be 1 to 65535, got '\(portText)'")
        }
        guard let address = try? SocketAddress(ipAddress: String(host), port: port) else {
            throw section.error("listen", "'\(host)' is not an IP address (names are not looked up)")
        }
        if !allowNonLoopback && !isLoopback(address) {
            throw section.error("listen", "\(text) is not a loopback address: every host that reaches it could ask; set allow_non_loopback = true to mean it")
        }
        return HTTPListener.Address(host: String(host), port: port)
    }

    private static func isLoopback(_ address: SocketAddress) -> Bool {
        switch address {
        case .v4(let v4): return UInt32(bigEndian: v4.address.sin_addr.s_addr) >> 24 == 127
        case .v6(let v6):
            let bytes = withUnsafeBytes(of: v6.address.sin6_addr) { Array($0) }
            return bytes == [UInt8](repeating: 0, count: 15) + [1]
        default: return false
        }
    }
}
