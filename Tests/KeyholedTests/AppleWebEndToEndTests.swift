import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// Sign in with Apple on the web (`apple.authorize`, then Apple's form_post through
/// `apple.callback`) through keyholed, against a fake Apple on loopback.
@Suite("Sign in with Apple on the web, end to end", .serialized, .ownThreads)
struct AppleWebEndToEndTests {
    typealias Base = AppleSignInEndToEndTests

    /// keyholed with a web client (the Services ID and its return URL) and one allowed origin.
    static func start(_ apple: FakeApple, extra: String = "") throws -> (DaemonProcess, RawConnection) {
        let (directory, config) = try Base.setUp(apple, extra: "web_return_origins = [\"https://app.example.com\"]\n" + extra)
        let daemon = try DaemonProcess(config: config, directory: directory)
        try daemon.waitUntilReady()
        return (daemon, try RawConnection(path: daemon.socketPath))
    }

    /// The query of Apple's authorization URL, decoded.
    static func query(_ url: String) throws -> [String: String] {
        let components = try #require(URLComponents(string: url))
        return Dictionary(uniqueKeysWithValues: (components.queryItems ?? []).map { ($0.name, $0.value ?? "") })
    }

    /// One browser's start: the authorization's answer, its state and nonce (as Apple received
    /// them), and the binding cookie's value.
    struct Started {
        var answer: JSONValue
        var state: String
        var nonce: String
        var cookie: String
    }

    static func authorize(_ connection: RawConnection, _ args: [String: JSONValue] = [:]) throws -> Started {
        let answer = try connection.result("apple.authorize", args)
        let query = try Self.query(try #require(answer["url"]?.stringValue))
        return Started(
            answer: answer, state: try #require(query["state"]), nonce: try #require(query["nonce"]),
            cookie: try #require(answer["cookie"]?["value"]?.stringValue))
    }

    /// The users and sessions keyholed holds.
    static func counts(_ connection: RawConnection) throws -> [JSONValue?] {
        let store = try connection.result("stats")["store"]
        return [store?["users"], store?["sessions"]]
    }

    @Test("start, Apple's consent, callback: the user signed in with the name Apple sent once, sent where it asked; a replayed callback is refused")
    func wholeFlow() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try Self.start(apple)
        let started = try Self.authorize(connection, ["return_to": "/account?tab=1"])
        let answer = started.answer
        let url = try #require(answer["url"]?.stringValue)
        #expect(url.hasPrefix("\(apple.url)/auth/authorize?"))
        let query = try Self.query(url)
        #expect(query["client_id"] == Base.web)
        #expect(query["redirect_uri"] == Base.redirect)
        #expect(query["response_type"] == "code id_token")
        #expect(query["response_mode"] == "form_post")
        #expect(query["scope"] == "name email")
        #expect(answer["state"]?.stringValue == started.state)
        #expect(started.state.utf8.count == 43 && started.nonce.utf8.count == 43 && started.cookie.utf8.count == 43)
        #expect(Set([started.state, started.nonce, started.cookie]).count == 3)
        #expect(answer["cookie"]?["name"] == "__Host-kh_apple")
        #expect(answer["cookie"]?["max_age"] == 600)
        #expect(answer["cookie"]?["set_cookie"]?.stringValue == "__Host-kh_apple=\(started.cookie); Max-Age=600; Path=/; Secure; HttpOnly; SameSite=None")

        // Apple: the user consents; its form_post carries the nonce in the token, a code, and (first
        // time only) the user's name and email as a JSON text.
        let sub = "001234.web.0001"
        let form: [String: JSONValue] = [
            "state": .string(started.state),
            "code": .string(apple.issueCode(sub: sub, clientID: Base.web, redirectURI: Base.redirect)),
            "id_token": .string(apple.identityToken(sub: sub, audience: Base.web, nonce: started.nonce, email: "jane@example.com")),
            "user": #"{"name":{"firstName":"Jane","lastName":"Appleseed"},"email":"jane@example.com"}"#,
        ]
        let signedIn = try connection.result("apple.callback", ["form": .object(form), "cookie": .string(started.cookie)])
        #expect(signedIn["created"] == true, "\(apple.refusals)")
        #expect(signedIn["return_to"] == "/account?tab=1")
        #expect(signedIn["user"]?["name"] == ["given": "Jane", "family": "Appleseed"])
        #expect(signedIn["user"]?["email"] == "jane@example.com")
        let exchange = try #require(apple.tokenRequests.last)
        #expect(exchange["client_id"] == Base.web)
        #expect(exchange["redirect_uri"] == Base.redirect)
        let session = try #require(signedIn["session"]?["session"]?.stringValue)
        #expect(try connection.result("session.get", ["session": .string(session)])["sub"] == .string(sub))

        // Signing in again: a user field (which the browser could forge) renames nobody who has a
        // name, and its email is never taken.
        let again = try Self.authorize(connection)
        let renamed = try connection.result("apple.callback", ["form": [
            "state": .string(again.state), "code": .string(apple.issueCode(sub: sub, clientID: Base.web, redirectURI: Base.redirect)),
            "id_token": .string(apple.identityToken(sub: sub, audience: Base.web, nonce: again.nonce)),
            "user": #"{"name":{"firstName":"Mallory","lastName":"X"},"email":"mallory@example.com"}"#,
        ], "cookie": .string(again.cookie)])
        #expect(renamed["created"] == false)
        #expect(renamed["user"]?["name"] == ["given": "Jane", "family": "Appleseed"])
        #expect(renamed["user"]?["email"] == "jane@example.com")

        // The same form again (a replay, or the browser's back button): the state is used up.
        let before = try Self.counts(connection)
        #expect(try connection.errorCode("apple.callback", ["form": .object(form), "cookie": .string(started.cookie)]) == "state_invalid")
        #expect(try Self.counts(connection) == before)
        // None of the secrets is in the log.
        for secret in [started.state, started.nonce, started.cookie, session] { #expect(!daemon.stderr.contains(secret)) }
        #expect(try daemon.terminate() == 0)
        try await apple.close()
    }

    @Test("every refusal stores nothing: another browser, a nonce of another authorization, a token for another client, Apple's error, Apple refusing or failing")
    func refusals() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try Self.start(apple)
        let sub = "001234.web.0002"
        let before = try Self.counts(connection)
        func callback(_ started: Started, cookie: String? = nil, token: String? = nil, _ extra: [String: JSONValue] = [:]) throws -> String? {
            var form: [String: JSONValue] = [
                "state": .string(started.state),
                "code": .string(apple.issueCode(sub: sub, clientID: Base.web, redirectURI: Base.redirect)),
                "id_token": .string(token ?? apple.identityToken(sub: sub, audience: Base.web, nonce: started.nonce)),
            ]
            form.merge(extra) { $1 }
            return try connection.errorCode("apple.callback", ["form": .object(form), "cookie": .string(cookie ?? started.cookie)])
        }

        // Another browser's cookie: refused, and the state is spent for the real browser too.
        let first = try Self.authorize(connection)
        let other = try Self.authorize(connection)
        #expect(try callback(first, cookie: other.cookie) == "state_invalid")
        #expect(try callback(first) == "state_invalid")
        // No cookie at all (the browser did not send it): the same, and that state is spent too.
        let cookieless = try Self.authorize(connection)
        #expect(try callback(cookieless, cookie: "") == "state_invalid")
        #expect(try callback(cookieless) == "state_invalid")
        // A token minted for another authorization (its nonce), or with none.
        #expect(try callback(other, token: apple.identityToken(sub: sub, audience: Base.web, nonce: first.nonce)) == "token_nonce_mismatch")
        #expect(try callback(try Self.authorize(connection), token: apple.identityToken(sub: sub, audience: Base.web)) == "token_nonce_mismatch")
        // A token for the app's bundle ID, not the Services ID the authorization was for.
        let forApp = try Self.authorize(connection)
        #expect(try callback(forApp, token: apple.identityToken(sub: sub, audience: Base.app, nonce: forApp.nonce)) == "token_audience_invalid")
        // The user cancelled at Apple.
        #expect(try callback(try Self.authorize(connection), ["error": "user_cancelled_authorize"]) == "apple_authorization_refused")
        // Apple refuses the code, then cannot be reached.
        apple.refuseAll(with: "invalid_grant")
        #expect(try callback(try Self.authorize(connection)) == "upstream_rejected")
        apple.recover()
        apple.fail(with: .serviceUnavailable)
        #expect(try callback(try Self.authorize(connection)) == "upstream_unavailable")
        apple.recover()
        // A form without a code (or a token) is malformed: refused before the state is looked at,
        // which stays usable.
        let unspent = try Self.authorize(connection)
        #expect(try connection.errorCode("apple.callback", ["form": ["state": .string(unspent.state), "id_token": "x"], "cookie": .string(unspent.cookie)]) == "bad_request")
        #expect(try callback(unspent, ["error": "user_cancelled_authorize"]) == "apple_authorization_refused")
        // A form with no state, and a form that is not an object.
        #expect(try connection.errorCode("apple.callback", ["form": ["code": "c", "id_token": "x"], "cookie": "x"]) == "state_invalid")
        #expect(try connection.errorCode("apple.callback", ["form": "state=x", "cookie": "x"]) == "bad_request")
        #expect(try Self.counts(connection) == before)

        // What the user field holds never fails a sign-in: not JSON, or far too long, it is ignored
        // with a warning that does not quote it.
        let marker = "NOTJSON-\(UUID().uuidString)"
        let plain = try Self.authorize(connection)
        var form: [String: JSONValue] = [
            "state": .string(plain.state), "code": .string(apple.issueCode(sub: sub, clientID: Base.web, redirectURI: Base.redirect)),
            "id_token": .string(apple.identityToken(sub: sub, audience: Base.web, nonce: plain.nonce)), "user": .string("{\(marker)"),
        ]
        let signedIn = try connection.result("apple.callback", ["form": .object(form), "cookie": .string(plain.cookie)])
        #expect(signedIn["user"]?["name"] == nil)
        let huge = try Self.authorize(connection)
        form["state"] = .string(huge.state)
        form["code"] = .string(apple.issueCode(sub: sub, clientID: Base.web, redirectURI: Base.redirect))
        form["id_token"] = .string(apple.identityToken(sub: sub, audience: Base.web, nonce: huge.nonce))
        form["user"] = .string(#"{"name":{"firstName":""# + String(repeating: "J", count: 8000) + #""}}"#)
        #expect(try connection.result("apple.callback", ["form": .object(form), "cookie": .string(huge.cookie)])["user"]?["name"] == nil)
        #expect(try daemon.terminate() == 0)
        #expect(daemon.stderr.contains("apple.user_field_ignored"))
        #expect(!daemon.stderr.contains(marker))
        try await apple.close()
    }

    @Test("return_to, redirect_uri, scope and client_id are checked before anything is kept; a peer's oldest pending authorization goes past its bound")
    func authorizeChecks() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try Self.start(apple, extra: "web_pending_per_peer = 2\nweb_cookie = \"__Host-signin\"\n")
        for bad: [String: JSONValue] in [
            ["return_to": "//evil.example"], ["return_to": "https://evil.example/"], ["return_to": "/\\evil.example"],
            ["return_to": "https://app.example.com@evil.example/"], ["redirect_uri": "https://evil.example/cb"], ["scope": "openid"],
            ["client_id": "com.example.other"], ["client_id": .string(Base.app)],
        ] {
            let code = try connection.errorCode("apple.authorize", bad)
            // The app's bundle ID is a client id with no return URL: not a web client.
            #expect(code == (bad["client_id"] == .string(Base.app) ? "not_configured" : "bad_request"), "\(bad)")
        }
        let allowed = try Self.authorize(connection, ["return_to": "https://app.example.com/home", "scope": "", "redirect_uri": .string(Base.redirect)])
        #expect(try Self.query(try #require(allowed.answer["url"]?.stringValue))["scope"] == nil)
        #expect(allowed.answer["cookie"]?["name"] == "__Host-signin")

        // Two pending per peer: a third start pushes the first (allowed) out.
        let second = try Self.authorize(connection)
        let third = try Self.authorize(connection)
        func cancel(_ started: Started) throws -> String? {
            try connection.errorCode("apple.callback", ["form": ["state": .string(started.state), "error": "user_cancelled_authorize"], "cookie": .string(started.cookie)])
        }
        #expect(try cancel(allowed) == "state_invalid")
        #expect(try cancel(second) == "apple_authorization_refused")
        #expect(try cancel(third) == "apple_authorization_refused")
        #expect(try daemon.terminate() == 0)
        try await apple.close()
    }

    @Test("every case of vectors/apple_web.json gets its code, or a result with exactly its members")
    func vectors() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try Self.start(apple)
        for vector in try Vectors.load("apple_web.json") {
            let name = vector["name"]!.stringValue!
            guard case .object(var args)? = vector["args"], let op = vector["op"]?.stringValue else {
                Issue.record("\(name): no op or args")
                continue
            }
            if vector["fresh"] == true {
                let fresh = try Self.authorize(connection)
                if case .object(var form)? = args["form"], form["state"] != nil {
                    form["state"] = .string(fresh.state)
                    args["form"] = .object(form)
                }
                if args["cookie"] == "FRESH" { args["cookie"] = .string(fresh.cookie) }
            }
            let response = try connection.call(op, args)
            let expect = vector["expect"]!
            #expect(response["ok"] == expect["ok"], "\(name): \(response)")
            if let code = expect["code"] { #expect(response["error"]?["code"] == code, "\(name): \(response)") }
            if let keys = expect["result_keys"]?.arrayValue {
                #expect(response["result"]?.objectValue?.keys.sorted() == keys.compactMap(\.stringValue), "\(name)")
            }
        }
        #expect(apple.refusals.isEmpty && apple.tokenRequests.isEmpty, "no case reaches Apple")
        #expect(try daemon.terminate() == 0)
        try await apple.close()
    }

    @Test("without code exchange nothing starts: apple.authorize is not_configured, as no callback could complete")
    func withoutExchange() throws {
        let daemon = try DaemonProcess.start(config: """
            [[issuer]]
            name = "apple"
            preset = "apple"
            jwks_uri = "\(TokenEndToEndTests.apple.appendingPathComponent("apple_jwks_go-pkgz-auth.json").path)"
            audiences = ["\(Base.web)"]

            [apple]
            redirect_uris = { "\(Base.web)" = "\(Base.redirect)" }
            """)
        let connection = try RawConnection(path: daemon.socketPath)
        #expect(try connection.errorCode("apple.authorize") == "not_configured")
        let refusal = try connection.call("apple.authorize")
        #expect(refusal["error"]?["message"]?.stringValue?.contains("team_id, key_id, private_key_file and store_key_file") == true, "\(refusal)")
        #expect(try daemon.terminate() == 0)
    }
}
