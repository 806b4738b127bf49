import Testing

@testable import KeyholeServer

@Suite("Sign in with Apple on the web: return_to")
struct AppleWebReturnToTests {
    let returnTo = AppleWebReturnTo(origins: ["https://app.example.com", "https://example.com:8443"])

    @Test("paths on the site and URLs on a configured origin are taken")
    func taken() {
        for text in [
            "/", "/account", "/a/b?c=d&e=%2F%2Fx#frag", "/.//evil.example", "/%2F%2Fevil.example", "https://app.example.com",
            "https://app.example.com/", "https://APP.Example.com/Path?q#f", "https://app.example.com?x=1", "https://app.example.com#top",
            "https://example.com:8443/x", String(repeating: "a", count: 2047).replacingCharacters(in: "/"),
        ] {
            #expect(returnTo.refusal(text) == nil, "\(text)")
        }
    }

    @Test("every way off the site is refused: other hosts, schemes, user info, look-alike hosts, what browsers rewrite")
    func refused() {
        for text in [
            "", "//evil.example", "//evil.example/path", "/\\evil.example", "\\\\evil.example", "/\t/evil.example", "/\n/evil.example",
            "/\r/evil.example", "/ /evil.example", "/\u{0}", "/\u{7F}", "/é", "https://evil.example", "http://app.example.com",
            "https://app.example.com@evil.example", "https://app.example.com.evil.example", "https://app.example.com:444/",
            "https://app.example.co", "https://example.com/", "https://example.com:84430/", "javascript:alert(1)",
            "data:text/html,x", "evil.example", "app.example.com/x", "https:/app.example.com", "https:app.example.com",
            "/" + String(repeating: "a", count: 2048),
        ] {
            #expect(returnTo.refusal(text) != nil, "\(text.debugDescription)")
        }
        #expect(AppleWebReturnTo(origins: []).refusal("https://app.example.com/") != nil, "no origin configured: only paths")
    }

    @Test("a configured origin has one form; paths, queries, user info, wildcards and plain http off loopback are refused")
    func origins() {
        #expect(AppleWebReturnTo.origin("https://App.Example.com/") == "https://app.example.com")
        #expect(AppleWebReturnTo.origin("https://example.com:8443") == "https://example.com:8443")
        #expect(AppleWebReturnTo.origin("http://127.0.0.1:8080") == "http://127.0.0.1:8080")
        #expect(AppleWebReturnTo.origin("http://localhost") == "http://localhost")
        #expect(AppleWebReturnTo.origin("http://[::1]:80") == "http://[::1]:80")
        for bad in [
            "", "https://", "example.com", "http://example.com", "https://example.com/path", "https://example.com?x",
            "https://user@example.com", "https://*.example.com", "https://example.com:0", "https://example.com:65536",
            "https://example.com:", "https://example.com:80:80", "https://[::2]", "ftp://example.com", "https://exa mple.com",
            "https://exämple.com", "https://example.com#x",
        ] {
            #expect(AppleWebReturnTo.origin(bad) == nil, "\(bad)")
        }
    }
}

extension String {
    /// This string with its first character replaced by `first`.
    fileprivate func replacingCharacters(in first: String) -> String { first + dropFirst() }
}
