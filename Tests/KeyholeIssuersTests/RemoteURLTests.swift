import Foundation
import KeyholeIssuers
import KeyholeTestSupport
import Testing

/// The URL parser behind every "https, or http only to loopback" rule (issue 26, finding 4).
@Suite("RemoteURL")
struct RemoteURLTests {
    /// (URL, host, port, loopback): URLs that parse, with what they are.
    static let parsed: [(String, String, Int?, Bool)] = [
        ("https://appleid.apple.com/auth/keys", "appleid.apple.com", nil, false),
        ("https://www.googleapis.com/oauth2/v3/certs?x=1&y=%2F", "www.googleapis.com", nil, false),
        ("https://example.com?x", "example.com", nil, false),
        ("HTTPS://Example.COM:8443/", "example.com", 8443, false),
        ("http://127.0.0.1:8080/keys", "127.0.0.1", 8080, true),
        ("http://127.255.255.254/", "127.255.255.254", nil, true),
        ("http://localhost", "localhost", nil, true),
        ("http://LOCALHOST:9/", "localhost", 9, true),
        ("HTTP://127.0.0.1/keys", "127.0.0.1", nil, true),
        ("http://[::1]:8080/", "::1", 8080, true),
        ("http://[::1]", "::1", nil, true),
        // Parsed, but not loopback: plain http to them is refused.
        ("http://localhost.evil.example/", "localhost.evil.example", nil, false),
        ("http://127.0.0.1.evil.example/", "127.0.0.1.evil.example", nil, false),
        ("HTTP://evil.example/", "evil.example", nil, false),
        ("http://128.0.0.1/", "128.0.0.1", nil, false),
        // Other spellings of loopback fail closed.
        ("http://127.1/", "127.1", nil, false),
        ("http://127.000.0.1/", "127.000.0.1", nil, false),
        ("http://2130706433/", "2130706433", nil, false),
        ("http://127.0.0.256/", "127.0.0.256", nil, false),
        ("http://[0:0:0:0:0:0:0:1]/", "0:0:0:0:0:0:0:1", nil, false),
        ("http://[::ffff:127.0.0.1]/", "::ffff:127.0.0.1", nil, false),
        ("http://localhost./", "localhost.", nil, false),
    ]

    @Test("scheme, host and port are parsed; loopback is the exact host", arguments: parsed)
    func parses(text: String, host: String, port: Int?, loopback: Bool) throws {
        let url = try RemoteURL(text)
        #expect(url.host == host)
        #expect(url.port == port)
        #expect(url.isLoopback == loopback)
        // The scheme from the text itself, not from the parser under test.
        let https = text.lowercased().hasPrefix("https://")
        #expect(url.scheme == (https ? .https : .http))
        #expect(url.isPermitted == (loopback || https))
        #expect(RemoteURL.permits(text) == url.isPermitted)
        // The HTTP client parses with Foundation's URL: it must find the same host and port.
        let foundation = try #require(URL(string: text))
        #expect(foundation.host?.lowercased().trimmingCharacters(in: CharacterSet(charactersIn: "[]")) == host)
        #expect(foundation.port == port)
        #expect(foundation.user == nil && foundation.password == nil)
    }

    /// URLs refused outright, with a word of the reason.
    static let refused: [(String, String)] = [
        ("http://127.0.0.1:80@evil.example/", "user information"),
        ("http://127.0.0.1@evil.example/", "user information"),
        ("http://user@127.0.0.1/", "user information"),
        ("https://user:password@example.com/", "user information"),
        ("http://localhost:1@localhost:2/", "user information"),
        ("http://127.0.0.1\\@evil.example/", "not allowed"),
        ("http://127.0.0.1#@evil.example/", "fragment"),
        ("https://example.com/cb#x", "fragment"),
        ("http://127.0.0.1%40evil.example/", "host"),
        ("http://127.0.0.1 /", "not allowed"),
        ("http://127.0.0.1\t/", "not allowed"),
        ("http://127.0.0.1/\u{e9}", "not allowed"),
        ("http://127.0.0.1/%zz", "%"),
        ("http://127.0.0.1/%4", "%"),
        ("http://127.0.0.1:/", "port"),
        ("http://127.0.0.1:0/", "port"),
        ("http://127.0.0.1:65536/", "port"),
        ("http://127.0.0.1:80a/", "port"),
        ("http://127.0.0.1:080080/", "port"),
        ("http://[::1%25lo]/", "IPv6"),
        ("http://[::1/", "IPv6"),
        ("http://[]/", "IPv6"),
        ("http://[::1]x/", "port"),
        ("http://127.0.0.1/[x]", "[ or ]"),
        ("http:///keys", "no host"),
        ("http://:80/", "no host"),
        ("http://ex_ample.com/", "host"),
        ("ftp://127.0.0.1/", "https://"),
        ("file:///etc/passwd", "https://"),
        ("http:127.0.0.1/", "https://"),
        ("http:/127.0.0.1/", "https://"),
        ("//127.0.0.1/", "https://"),
        ("", "https://"),
        ("https://example.com/" + String(repeating: "a", count: 4096), "longer"),
    ]

    @Test("user information, odd characters, fragments and bad ports are refused", arguments: refused)
    func refuses(text: String, reason: String) {
        do {
            let url = try RemoteURL(text)
            Issue.record("accepted \(text) as host \(url.host)")
        } catch {
            #expect(error.description.contains(reason), "\(text): \(error)")
        }
        #expect(!RemoteURL.permits(text))
    }
}
