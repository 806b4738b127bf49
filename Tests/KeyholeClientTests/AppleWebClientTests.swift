import Foundation
import KeyholeClient
import KeyholeProtocol
import Testing

/// `appleAuthorize` and `appleCallback` against a real keyholed whose Apple client id is a web client.
@Suite("KeyholeClient: Sign in with Apple on the web", .serialized)
struct AppleWebClientTests {
    @Test("authorize hands out Apple's URL and the binding cookie; callback refuses another browser's cookie, Apple's error and a token that is not one")
    func authorizeAndCallback() async throws {
        // The harness's audience, to name it in the configuration of the one this test uses.
        let plain = try await Harness.start()
        let audience = plain.audience
        #expect(await plain.stop().status == 0)
        let harness = try await Harness.start(configExtra: "[apple]\nredirect_uris = { \"\(audience)\" = \"https://example.com/apple/callback\" }\n")
        let client = KeyholeClient(socketPath: harness.socket)

        let started = try await client.appleAuthorize(returnTo: "/account")
        let state = try #require(started["state"]?.stringValue)
        let cookie = try #require(started["cookie"]?["value"]?.stringValue)
        let url = try #require(started["url"]?.stringValue.flatMap(URLComponents.init(string:)))
        // The harness points Apple at a loopback port that refuses connections: no test reaches Apple.
        #expect(url.scheme == "http" && url.host == "127.0.0.1" && url.port == 9 && url.path == "/auth/authorize")
        let query = Dictionary(uniqueKeysWithValues: (url.queryItems ?? []).map { ($0.name, $0.value ?? "") })
        #expect(query["state"] == state)
        #expect(query["client_id"] == audience)
        #expect(query["redirect_uri"] == "https://example.com/apple/callback")
        #expect(started["cookie"]?["set_cookie"]?.stringValue?.hasPrefix("__Host-kh_apple=\(cookie); ") == true)

        func code(_ body: () async throws -> [String: JSONValue]) async -> ProtocolError.Code? {
            do {
                _ = try await body()
                return nil
            } catch let error as ProtocolError {
                return error.code
            } catch {
                return nil
            }
        }
        #expect(await code { try await client.appleAuthorize(returnTo: "//evil.example") } == .badRequest)
        let form = ["state": state, "code": "c", "id_token": "x"]
        #expect(await code { try await client.appleCallback(form: form, cookie: "another browser's") } == .stateInvalid)
        #expect(await code { try await client.appleCallback(form: form, cookie: cookie) } == .stateInvalid, "the state was used up")

        let cancelled = try await client.appleAuthorize()
        let cancelledForm = ["state": cancelled["state"]?.stringValue ?? "", "error": "user_cancelled_authorize"]
        let cancelledCookie = cancelled["cookie"]?["value"]?.stringValue ?? ""
        #expect(await code { try await client.appleCallback(form: cancelledForm, cookie: cancelledCookie) } == .appleAuthorizationRefused)

        let malformed = try await client.appleAuthorize(scope: "")
        let malformedForm = ["state": malformed["state"]?.stringValue ?? "", "code": "c", "id_token": "not-a-token"]
        let malformedCookie = malformed["cookie"]?["value"]?.stringValue ?? ""
        #expect(await code { try await client.appleCallback(form: malformedForm, cookie: malformedCookie, session: ["ttl_s": 60]) } == .tokenMalformed)

        try await client.close()
        let (status, stderr) = await harness.stop()
        #expect(status == 0, "\(stderr)")
    }
}
