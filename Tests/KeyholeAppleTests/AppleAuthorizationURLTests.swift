import KeyholeApple
import Testing

@Suite("Apple's authorization URL")
struct AppleAuthorizationURLTests {
    /// The query's pairs, percent-decoded byte by byte (nil for a malformed escape).
    static func pairs(_ query: Substring) -> [(String, String)]? {
        func decode(_ text: Substring) -> String? {
            var bytes: [UInt8] = []
            var iterator = Array(text.utf8).makeIterator()
            while let byte = iterator.next() {
                guard byte == UInt8(ascii: "%") else {
                    // Only unreserved characters may stand as they are.
                    guard byte < 0x80, "-._~".utf8.contains(byte) || (byte >= 0x30 && byte <= 0x39) || (byte | 0x20 >= 0x61 && byte | 0x20 <= 0x7A)
                    else { return nil }
                    bytes.append(byte)
                    continue
                }
                guard let high = iterator.next(), let low = iterator.next(), let value = UInt8(String(decoding: [high, low], as: UTF8.self), radix: 16)
                else { return nil }
                bytes.append(value)
            }
            return String(validating: bytes, as: UTF8.self)
        }
        var out: [(String, String)] = []
        for pair in query.split(separator: "&", omittingEmptySubsequences: false) {
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            guard parts.count == 2, let name = decode(parts[0]), let value = decode(parts[1]) else { return nil }
            out.append((name, value))
        }
        return out
    }

    @Test("asks for a code and an identity token by form_post, every value encoded so that none adds a parameter")
    func url() throws {
        var configuration = AppleClient.Configuration()
        let hostile = "a&scope=openid#x y=é\u{0}/?"
        let url = configuration.authorizationURL(
            clientID: "com.example.web", redirectURI: "https://example.com/apple/callback?x=1&y=2", scope: "name email",
            state: hostile, nonce: "n+/=")
        let prefix = "https://appleid.apple.com/auth/authorize?"
        #expect(url.hasPrefix(prefix))
        #expect(!url.contains("#") && !url.contains(" ") && !url.dropFirst(prefix.count).contains("?"))
        let decoded = try #require(Self.pairs(url.dropFirst(prefix.count)))
        #expect(decoded.map(\.0) == ["client_id", "redirect_uri", "response_type", "response_mode", "scope", "state", "nonce"])
        #expect(
            decoded.map(\.1) == [
                "com.example.web", "https://example.com/apple/callback?x=1&y=2", "code id_token", "form_post", "name email", hostile,
                "n+/=",
            ])
        #expect(url.contains("response_type=code%20id_token"), "a space is %20, as Apple's own examples write it")

        // No scope asked for: no scope parameter (Apple then allows another response mode, but
        // keyholed reads form_post only). A configured endpoint with a trailing slash, as the fake Apple's.
        configuration.endpoint = "http://127.0.0.1:8080/"
        let plain = configuration.authorizationURL(clientID: "c", redirectURI: "https://e/cb", scope: "", state: "s", nonce: "n")
        #expect(plain == "http://127.0.0.1:8080/auth/authorize?client_id=c&redirect_uri=https%3A%2F%2Fe%2Fcb&response_type=code%20id_token&response_mode=form_post&state=s&nonce=n")
    }
}
