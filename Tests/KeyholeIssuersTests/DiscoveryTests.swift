import KeyholeIssuers
import KeyholeJOSE
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Testing

/// OpenID Connect discovery against a real HTTP server on loopback.
@Suite("OpenID Connect discovery")
struct DiscoveryTests {
    typealias Harness = IssuerKeysHarness

    static func discovered(_ url: String) -> IssuerConfiguration {
        IssuerConfiguration(name: "oidc", issuer: url, keySet: .discovery(url), audiences: ["client"])
    }

    static func document(issuer: String, jwksURI: String) -> LocalHTTPServer.Reply {
        LocalHTTPServer.Reply(body: Array(#"{"issuer":"\#(issuer)","jwks_uri":"\#(jwksURI)","id_token_signing_alg_values_supported":["RS256"]}"#.utf8))
    }

    @Test("the key set comes from the jwks_uri of the issuer's openid-configuration")
    func discovery() async throws {
        let server = try await LocalHTTPServer(reply: LocalHTTPServer.Reply(status: .notFound))
        server.setReply(Self.document(issuer: server.url, jwksURI: server.url + "/oauth2/certs"), forPath: "/.well-known/openid-configuration")
        server.setReply(try Harness.reply("panva-wellknown-20241001"), forPath: "/oauth2/certs")
        try await Harness.run(reply: .init(), configuration: Self.discovered, server: server) { h in
            await h.keys.waitUntil { $0.usable }
            #expect(h.server.received.map(\.uri) == ["/.well-known/openid-configuration", "/oauth2/certs"])
            #expect(h.keys.status().source == "discovery of \(server.url)")
            // A refresh reuses the discovered URL.
            #expect(await h.keys.refresh() == .succeeded)
            #expect(h.server.received.map(\.uri).last == "/oauth2/certs")
            #expect(h.server.received.count == 3)
        }
        try await server.close()
    }

    @Test("a document that speaks for another issuer, or points to a non-https jwks_uri, is refused", arguments: [
        ("https://evil.example", "SELF/oauth2/certs", "names another issuer"),
        ("SELF", "http://keys.example/certs", "jwks_uri that is not https"),
        ("SELF/", "SELF/oauth2/certs", "names another issuer"),
    ])
    func refusedDocuments(issuer: String, jwksURI: String, message: String) async throws {
        let server = try await LocalHTTPServer(reply: LocalHTTPServer.Reply(status: .notFound))
        server.setReply(
            Self.document(
                issuer: issuer.replacingOccurrences(of: "SELF", with: server.url),
                jwksURI: jwksURI.replacingOccurrences(of: "SELF", with: server.url)),
            forPath: "/.well-known/openid-configuration")
        server.setReply(try Harness.reply("panva-wellknown-20241001"), forPath: "/oauth2/certs")
        try await Harness.run(reply: .init(), configuration: Self.discovered, server: server) { h in
            await h.keys.waitUntil { $0.failures == 1 }
            let status = h.keys.status()
            #expect(!status.usable)
            #expect(status.lastError?.contains(message) == true, "\(status.lastError ?? "")")
            #expect(h.server.received.map(\.uri) == ["/.well-known/openid-configuration"])
        }
        try await server.close()
    }
}
