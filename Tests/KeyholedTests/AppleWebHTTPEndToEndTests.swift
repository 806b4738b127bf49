import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// Sign in with Apple's pages on keyholed's HTTP listener (HTTP.md, "Sign in with Apple"): a browser's
/// requests by hand, against a fake Apple on loopback.
@Suite("Sign in with Apple over HTTP, end to end", .serialized, .ownThreads)
struct AppleWebHTTPEndToEndTests {
    typealias Base = AppleSignInEndToEndTests

    /// keyholed with the web client, and `[http]` with `web = true` on `<dir>/h.sock`.
    static func start(_ apple: FakeApple, http: String = "web = true\nweb_error_path = \"/signin?from=apple\"\n") throws -> (DaemonProcess, String) {
        let (directory, config) = try Base.setUp(apple)
        let path = directory.appendingPathComponent("h.sock").path
        let daemon = try DaemonProcess(config: config + "\n[http]\nsocket = \"\(path)\"\n\(http)", directory: directory)
        try daemon.waitUntilReady()
        try daemon.waitForStderr(containing: "http.listening")
        return (daemon, path)
    }

    static func exchange(_ path: String) throws -> HTTPExchange { HTTPExchange(try RawConnection(path: path)) }

    /// A POST of `body` as a form, with `headers`; its answer.
    static func post(_ path: String, _ target: String, body: String, type: String = "application/x-www-form-urlencoded", headers: [String: String] = [:]) throws -> HTTPExchange.Answer {
        let exchange = try Self.exchange(path)
        var text = "POST \(target) HTTP/1.1\r\nHost: example.com\r\nContent-Type: \(type)\r\nContent-Length: \(body.utf8.count)\r\n"
        for (name, value) in headers.sorted(by: { $0.key < $1.key }) { text += "\(name): \(value)\r\n" }
        try exchange.connection.send(Array((text + "\r\n" + body).utf8))
        return try exchange.readAnswer()
    }

    static func formEncode(_ fields: [(String, String)]) -> String {
        var allowed = CharacterSet.alphanumerics
        allowed.insert(charactersIn: "-._~")
        return fields.map { "\($0.0)=\($0.1.addingPercentEncoding(withAllowedCharacters: allowed)!)" }.joined(separator: "&")
    }

    /// The value a Set-Cookie line sets for `name`, among an answer's.
    static func cookie(_ answer: HTTPExchange.Answer, _ name: String) -> (value: String, line: String)? {
        for (header, line) in answer.headers where header.lowercased() == "set-cookie" && line.hasPrefix("\(name)=") {
            return (String(line.dropFirst(name.count + 1).prefix { $0 != ";" }), line)
        }
        return nil
    }

    @Test("start, Apple, callback, signed in (authz 200), logout (authz 401): with cookies and redirects only")
    func browser() async throws {
        let apple = try await FakeApple()
        let (daemon, path) = try Self.start(apple)
        let http = try Self.exchange(path)

        let start = try http.request("GET", "/apple/start?return_to=%2Faccount%3Ftab%3D1")
        #expect(start.status == 302)
        let location = try #require(start.header("Location"))
        #expect(location.hasPrefix("\(apple.url)/auth/authorize?"))
        let query = try AppleWebEndToEndTests.query(location)
        let state = try #require(query["state"]), nonce = try #require(query["nonce"])
        let binding = try #require(Self.cookie(start, "__Host-kh_apple"))
        #expect(binding.line == "__Host-kh_apple=\(binding.value); Max-Age=600; Path=/; Secure; HttpOnly; SameSite=None")
        #expect(start.header("Cache-Control") == "no-store")

        // Apple's form_post, with the binding cookie the browser kept.
        let sub = "001234.http.0001"
        let form = Self.formEncode([
            ("state", state), ("code", apple.issueCode(sub: sub, clientID: Base.web, redirectURI: Base.redirect)),
            ("id_token", apple.identityToken(sub: sub, audience: Base.web, nonce: nonce)),
            ("user", #"{"name":{"firstName":"Ada","lastName":"Lovelace"}}"#),
        ])
        let signedIn = try Self.post(path, "/apple/callback", body: form, headers: ["Cookie": "other=1; __Host-kh_apple=\(binding.value)"])
        #expect(signedIn.status == 303, "\(signedIn)")
        #expect(signedIn.header("Location") == "/account?tab=1")
        let session = try #require(Self.cookie(signedIn, "kh_session"))
        #expect(session.value.hasPrefix("kh_"))
        #expect(session.line.hasSuffix("; Path=/; Secure; HttpOnly; SameSite=Lax"))
        #expect(Self.cookie(signedIn, "__Host-kh_apple")?.line.contains("Max-Age=0") == true, "the binding cookie is cleared")

        // Signed in: forward-auth lets the browser through, as the user Apple named.
        let authz = try http.request("GET", "/authz", headers: ["Cookie": "kh_session=\(session.value)"])
        #expect(authz.status == 200)
        #expect(authz.header("X-Auth-Request-User") == sub)

        // The same form again: the state is spent; to the error path, the binding cleared.
        let replay = try Self.post(path, "/apple/callback", body: form, headers: ["Cookie": "__Host-kh_apple=\(binding.value)"])
        #expect(replay.status == 303)
        #expect(replay.header("Location") == "/signin?from=apple&keyhole_error=state_invalid")
        #expect(Self.cookie(replay, "kh_session") == nil)

        // Logout from another site is refused; from this one, the session ends and its cookie is cleared.
        let forged = try Self.post(path, "/logout", body: "", headers: ["Cookie": "kh_session=\(session.value)", "Origin": "https://evil.example"])
        #expect(forged.status == 403)
        #expect(try http.request("GET", "/authz", headers: ["Cookie": "kh_session=\(session.value)"]).status == 200)
        let out = try Self.post(path, "/logout", body: "", headers: ["Cookie": "kh_session=\(session.value)", "Origin": "https://example.com"])
        #expect(out.status == 303)
        #expect(out.header("Location") == "/")
        #expect(Self.cookie(out, "kh_session")?.line.contains("Max-Age=0") == true)
        #expect(try http.request("GET", "/authz", headers: ["Cookie": "kh_session=\(session.value)"]).status == 401)
        for secret in [state, nonce, binding.value, session.value] { #expect(!daemon.stderr.contains(secret)) }
        #expect(try daemon.terminate() == 0)
        try await apple.close()
    }

    @Test("what the pages refuse: an off-site return_to, HEAD, another content type, a body past 16 KiB, Apple's error; off without web = true")
    func refusals() async throws {
        let apple = try await FakeApple()
        let (daemon, path) = try Self.start(apple)
        let http = try Self.exchange(path)
        #expect(try http.request("GET", "/apple/start?return_to=%2F%2Fevil.example").status == 400)
        #expect(try http.request("GET", "/apple/start?next=%2F").status == 400)
        #expect(try http.request("HEAD", "/apple/start").status == 405)
        #expect(try http.request("GET", "/logout").status == 405)
        #expect(try Self.post(path, "/apple/callback", body: "{}", type: "application/json").status == 415)
        #expect(try Self.post(path, "/apple/callback", body: "state=" + String(repeating: "a", count: 17 << 10)).status == 413)
        // Apple's error: to the error path with its code.
        let start = try http.request("GET", "/apple/start")
        let startLocation = try #require(start.header("Location"))
        let state = try #require(try AppleWebEndToEndTests.query(startLocation)["state"])
        let binding = try #require(Self.cookie(start, "__Host-kh_apple")).value
        let cancelled = try Self.post(
            path, "/apple/callback", body: Self.formEncode([("state", state), ("error", "user_cancelled_authorize")]),
            headers: ["Cookie": "__Host-kh_apple=\(binding)"])
        #expect(cancelled.header("Location") == "/signin?from=apple&keyhole_error=apple_authorization_refused")
        #expect(try daemon.terminate() == 0)

        // Without web = true the pages are not there.
        let (plain, plainPath) = try Self.start(apple, http: "")
        #expect(try Self.exchange(plainPath).request("GET", "/apple/start").status == 404)
        #expect(try Self.post(plainPath, "/apple/callback", body: "state=x").status == 404)
        #expect(try plain.terminate() == 0)
        try await apple.close()
    }
}
