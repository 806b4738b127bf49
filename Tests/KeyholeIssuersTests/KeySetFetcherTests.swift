import Foundation
import KeyholeIssuers
import KeyholeJOSE
import KeyholeTestSupport
import NIOCore
import Testing

/// The fetcher against a real HTTP server on loopback that records what it is asked.
@Suite("KeySetFetcher")
struct KeySetFetcherTests {
    static let document = Array(#"{"keys":[{"kty":"EC","crv":"P-256","kid":"k1","x":"KSexBRK64-3c_kZ4KBKLrSkDJpkZ9whgacjE32xzKDg","y":"x3h5ZOqsAOWSH7FJimD0YGdms9loUAFVjRqXTnNBUT4"}]}"#.utf8)

    func withFetcher(
        _ reply: LocalHTTPServer.Reply, configuration: KeySetFetcher.Configuration = .init(),
        _ body: (KeySetFetcher, LocalHTTPServer) async throws -> Void
    ) async throws {
        let server = try await LocalHTTPServer(reply: reply)
        let client = KeySetFetcher.makeClient(configuration: configuration)
        do {
            try await body(KeySetFetcher(client: client, configuration: configuration), server)
        } catch {
            try await client.shutdown()
            try await server.close()
            throw error
        }
        try await client.shutdown()
        try await server.close()
    }

    @Test("a key set is fetched with Cache-Control: no-cache, and the response's max-age is reported")
    func success() async throws {
        let reply = LocalHTTPServer.Reply(headers: [("Cache-Control", "public, max-age=19512")], body: Self.document)
        try await withFetcher(reply) { fetcher, server in
            let fetched = try await fetcher.fetch(server.url + "/auth/keys")
            #expect(fetched.document == Self.document)
            #expect(fetched.maxAge == 19512)
            #expect(try JWKSet(json: fetched.document).keys.first?.kid == "k1")
            #expect(server.received.count == 1)
            #expect(server.received.first?.uri == "/auth/keys")
            #expect(server.received.first?.headers["Cache-Control"] == ["no-cache"])
        }
    }

    @Test("a non-200 answer, an oversized body, a server that never answers and a redirect all fail", arguments: [
        LocalHTTPServer.Reply(status: .notFound, body: Array("no".utf8)),
        LocalHTTPServer.Reply(body: [UInt8](repeating: 0x20, count: 4096)),
        LocalHTTPServer.Reply(hang: true),
        LocalHTTPServer.Reply(status: .movedPermanently, headers: [("Location", "http://127.0.0.1:1/keys")]),
    ])
    func failures(reply: LocalHTTPServer.Reply) async throws {
        var configuration = KeySetFetcher.Configuration()
        configuration.maximumBytes = 1024
        configuration.totalTimeout = .milliseconds(500)
        try await withFetcher(reply, configuration: configuration) { fetcher, server in
            await #expect(throws: KeySetFetcher.Failure.self) { try await fetcher.fetch(server.url + "/keys") }
            // Redirects are not followed: exactly one request reached the server.
            #expect(server.received.count == 1)
        }
    }

    @Test("a server that trickles its body a byte at a time is cut off at the total timeout")
    func trickle() async throws {
        var configuration = KeySetFetcher.Configuration()
        configuration.totalTimeout = .milliseconds(300)
        configuration.readTimeout = .seconds(30)
        // A second a byte: the whole body would take over two minutes, so a cut-off at 300 ms stands out
        // from it even when the rest of a full run on a 2-core machine holds both of the test process's
        // cooperative threads and this test resumes late (8 s, then 25 s were seen).
        let reply = LocalHTTPServer.Reply(body: Self.document, trickle: .seconds(1))
        try await withFetcher(reply, configuration: configuration) { fetcher, server in
            let started = ContinuousClock.now
            do throws(KeySetFetcher.Failure) {
                _ = try await fetcher.fetch(server.url + "/keys")
                Issue.record("a trickled body of \(Self.document.count) bytes at 4 per second arrived within 300 ms")
            } catch {
                #expect(error.description.contains("took longer than 300 ms"), "\(error)")
            }
            // Far less than the two minutes and more the whole body would take.
            #expect(ContinuousClock.now - started < .seconds(90))
        }
    }

    @Test("discovery: a remote document may not point keyholed at plain http, even to loopback")
    func discoveryPolicy() async throws {
        try await withFetcher(LocalHTTPServer.Reply(status: .notFound)) { fetcher, server in
            server.setReply(
                LocalHTTPServer.Reply(body: Array(#"{"issuer":"\#(server.url)","jwks_uri":"http://127.0.0.1:1/keys"}"#.utf8)),
                forPath: "/.well-known/openid-configuration")
            // A loopback issuer (tests) may name a loopback key set.
            let url = try await fetcher.discoverKeySetURL(issuer: server.url)
            #expect(url == "http://127.0.0.1:1/keys")
        }
    }

    @Test("only https, or http to a loopback host, is fetched")
    func urlPolicy() async throws {
        try await withFetcher(LocalHTTPServer.Reply(body: Self.document)) { fetcher, server in
            for url in [
                "http://example.com/keys", "ftp://127.0.0.1/keys", "http://127.0.0.1.evil.example/keys", "file:///etc/passwd",
                "http://localhost.evil.example/keys", "http://127.0.0.1:80@evil.example/keys",
                // Both hosts loopback, so a prefix test let it through to the server: the user
                // information alone must refuse it.
                "http://127.0.0.1:1@127.0.0.1:\(server.port)/keys", "http://user@127.0.0.1:\(server.port)/keys",
            ] {
                await #expect(throws: KeySetFetcher.Failure.self, "\(url)") { try await fetcher.fetch(url) }
            }
            #expect(server.received.isEmpty)
            // An uppercase scheme is still http, to loopback here.
            let fetched = try await fetcher.fetch("HTTP://127.0.0.1:\(server.port)/keys")
            #expect(fetched.document == Self.document)
            #expect(server.received.count == 1)
        }
    }

    @Test("discovery: a jwks_uri with user information, or aimed at loopback by a remote issuer, is refused", arguments: [
        "http://127.0.0.1:80@evil.example/keys", "https://127.0.0.1:80@evil.example/keys", "http://user@127.0.0.1:1/keys",
        "http://localhost.evil.example/keys", "http://127.0.0.1.evil.example/keys", "https://x/#frag", "http://127.0.0.1\\@x/",
    ])
    func discoveredURLs(jwksURI: String) async throws {
        try await withFetcher(LocalHTTPServer.Reply(status: .notFound)) { fetcher, server in
            let document: [String: String] = ["issuer": server.url, "jwks_uri": jwksURI]
            server.setReply(
                LocalHTTPServer.Reply(body: Array(try JSONEncoder().encode(document))),
                forPath: "/.well-known/openid-configuration")
            await #expect(throws: KeySetFetcher.Failure.self) { try await fetcher.discoverKeySetURL(issuer: server.url) }
        }
        // A remote (https) issuer's document may name neither plain http nor a loopback host at all.
        for url in ["http://127.0.0.1:1/keys", "https://127.0.0.1/keys", "https://localhost:8443/keys", "https://[::1]/keys"] {
            #expect(throws: KeySetFetcher.Failure.self) {
                try KeySetFetcher.checkDiscovered(url, issuer: "https://login.example.com", document: "doc")
            }
        }
        try KeySetFetcher.checkDiscovered("https://login.example.com/keys", issuer: "https://login.example.com", document: "doc")
        try KeySetFetcher.checkDiscovered("http://[::1]:8080/keys", issuer: "http://127.0.0.1:8080", document: "doc")
    }
}
