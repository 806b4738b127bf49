import Foundation
import KeyholeIssuers
import KeyholeJOSE
import KeyholeProtocol
import KeyholeTestSupport
import Logging
import NIOCore

/// One remote issuer's keys, refreshed by a real loop from a real HTTP server on loopback, on a manual
/// clock: what the key-set cache tests drive.
struct IssuerKeysHarness {
    static let apple = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("KeyholeJOSETests/Fixtures/apple")

    /// A real Apple key set, as served.
    static func document(_ name: String) throws -> [UInt8] {
        Array(try Data(contentsOf: apple.appendingPathComponent("apple_jwks_\(name).json")))
    }

    /// A 200 reply with a key set and, if given, a max-age.
    static func reply(_ name: String, maxAge: Int? = nil) throws -> LocalHTTPServer.Reply {
        var headers = [("Content-Type", "application/json")]
        if let maxAge { headers.append(("Cache-Control", "public, max-age=\(maxAge)")) }
        return LocalHTTPServer.Reply(headers: headers, body: try document(name))
    }

    /// A real Apple token (kid FftONTxoEg, in the 20241001 and 2025 sets, not in 20240605) and a time
    /// at which it is valid.
    static func token() throws -> (token: String, now: Double) {
        let token = try String(contentsOf: apple.appendingPathComponent("apple_token_4.jwt"), encoding: .utf8)
            .filter { !$0.isWhitespace }
        let claims = try JSONValue.parse(ByteBuffer(bytes: try CompactJWS.parse(token).payload))
        return (token, Double(claims["iat"]!.intValue!) + 60)
    }

    static let start = 1_900_000_000.0

    let server: LocalHTTPServer
    let clock: ManualClock
    let keys: IssuerKeys
    let configuration: IssuerConfiguration

    static func apple(url: String) -> IssuerConfiguration {
        var configuration = IssuerPreset.apple.configuration(name: "apple", audiences: ["dev.timc.siwa-demo.TILiOS"])
        configuration.keySet = .url(url + "/auth/keys")
        return configuration
    }

    /// Starts a server with `reply`, makes the keys (from `persisted`, if any) and runs their refresh
    /// loop for the duration of `body`.
    static func run(
        reply: LocalHTTPServer.Reply, configuration makeConfiguration: (String) -> IssuerConfiguration = apple(url:),
        cache: KeySetCacheState.Configuration = .init(), persisted: KeySetStore.Entry? = nil,
        store: KeySetStore? = nil, server existing: LocalHTTPServer? = nil,
        _ body: (IssuerKeysHarness) async throws -> Void
    ) async throws {
        let server = if let existing { existing } else { try await LocalHTTPServer(reply: reply) }
        let clock = ManualClock(now: start)
        let configuration = makeConfiguration(server.url)
        let keys = IssuerKeys(configuration: configuration, cache: cache, persisted: persisted, clock: clock)
        // Fetch timeouts far beyond any test's holds: a test that holds the server's reply until its
        // waiters are counted must not race the 5 s default on a loaded CI runner (a full run saw the
        // held fetch time out and all sixteen waiters fail). KeySetFetcherTests test the timeouts.
        var fetching = KeySetFetcher.Configuration()
        fetching.totalTimeout = .seconds(120)
        fetching.readTimeout = .seconds(120)
        let client = KeySetFetcher.makeClient(configuration: fetching)
        let fetcher = KeySetFetcher(client: client, configuration: fetching)
        let logger = Logger(label: "test") { _ in SwiftLogNoOpLogHandler() }
        let loop = Task { await keys.run(fetcher: fetcher, store: store, logger: logger) }
        let harness = IssuerKeysHarness(server: server, clock: clock, keys: keys, configuration: configuration)
        let outcome: Result<Void, any Error>
        do {
            try await body(harness)
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        loop.cancel()
        await loop.value
        try await client.shutdown()
        if existing == nil { try? await server.close() }
        try outcome.get()
    }
}
