import AsyncHTTPClient
import Synchronization
import KeyholeProtocol
import NIOCore
import NIOHTTP1

/// Fetches an issuer's key set over HTTPS (or HTTP to a loopback host, for tests).
///
/// Bounded in every way a hostile or broken server could exploit: connect and total timeouts, a body
/// limit, no redirects (keys come from the configured URL or not at all).
public struct KeySetFetcher: Sendable {
    /// The fetcher's limits (issue 3, "The hot key-set cache").
    public struct Configuration: Sendable {
        /// Connecting may take this long.
        public var connectTimeout = TimeAmount.seconds(2)
        /// The whole fetch may take this long.
        public var totalTimeout = TimeAmount.seconds(5)
        /// A connection may be silent this long (within the total).
        public var readTimeout = TimeAmount.seconds(5)
        /// The largest key-set document accepted.
        public var maximumBytes = 1 << 20

        /// The defaults.
        public init() {}
    }

    /// A fetched document and how long the server says it stays fresh.
    public struct Fetched: Sendable {
        /// The response body.
        public let document: [UInt8]
        /// The response's `Cache-Control` max-age, if any.
        public let maxAge: Int64?
    }

    /// Why a fetch failed (shown in `jwks.status`; never contains key material).
    public struct Failure: Error, Sendable, CustomStringConvertible {
        /// What went wrong.
        public let description: String
    }

    private let client: HTTPClient
    private let configuration: Configuration

    /// A fetcher over `client`; make the client with `makeClient(configuration:)` and shut it down when done.
    public init(client: HTTPClient, configuration: Configuration = Configuration()) {
        self.client = client
        self.configuration = configuration
    }

    /// An HTTP client with the fetcher's connect timeout and no redirects.
    public static func makeClient(configuration: Configuration = Configuration()) -> HTTPClient {
        HTTPClient(
            eventLoopGroupProvider: .singleton,
            configuration: HTTPClient.Configuration(
                redirectConfiguration: .disallow,
                timeout: .init(connect: configuration.connectTimeout, read: configuration.readTimeout)))
    }

    /// GETs the key set at `url`, which must be https, or http to a loopback host.
    public func fetch(_ url: String) async throws(Failure) -> Fetched {
        let (body, headers) = try await get(url, accept: "application/json, application/jwk-set+json")
        return Fetched(
            document: Array(body.readableBytesView),
            maxAge: CacheControl.maxAge(headers["Cache-Control"].joined(separator: ",")))
    }

    /// The `jwks_uri` of the OpenID Connect issuer at `issuer`, from its
    /// `/.well-known/openid-configuration` (OpenID Connect Discovery 1.0 section 4).
    ///
    /// The document's `issuer` must be `issuer` exactly (section 4.3: otherwise a document could
    /// speak for another issuer), and its `jwks_uri` must be https, or http to a loopback host.
    public func discoverKeySetURL(issuer: String) async throws(Failure) -> String {
        let base = issuer.hasSuffix("/") ? String(issuer.dropLast()) : issuer
        let url = base + "/.well-known/openid-configuration"
        let (body, _) = try await get(url, accept: "application/json")
        guard case .object(let document)? = try? JSONValue.parse(body) else {
            throw Failure(description: "\(url) is not a JSON object")
        }
        guard document["issuer"] == .string(issuer) else {
            throw Failure(description: "\(url) names another issuer than \(issuer)")
        }
        guard case .string(let keySetURL)? = document["jwks_uri"] else {
            throw Failure(description: "\(url) has no jwks_uri string")
        }
        try Self.checkDiscovered(keySetURL, issuer: issuer, document: url)
        return keySetURL
    }

    /// The rules for a `jwks_uri` a discovery document gives: parsed as `RemoteURL` (no user
    /// information, whatever the scheme); plain http only to loopback, and loopback at all only when
    /// discovery itself is on loopback (tests): a remote document must not aim keyholed at services on
    /// keyholed's own host.
    public static func checkDiscovered(_ keySetURL: String, issuer: String, document: String) throws(Failure) {
        let target: RemoteURL
        let origin: RemoteURL
        do {
            target = try RemoteURL(keySetURL)
            origin = try RemoteURL(issuer)
        } catch {
            throw Failure(description: "\(document) gives a jwks_uri that is refused: \(error)")
        }
        guard target.isPermitted, !target.isLoopback || origin.isLoopback else {
            throw Failure(description: "\(document) gives a jwks_uri that is not https to another host")
        }
    }

    /// A GET bounded as a whole by `totalTimeout` (see `withDeadline`).
    private func get(_ url: String, accept: String) async throws(Failure) -> (ByteBuffer, HTTPHeaders) {
        let timeout = configuration.totalTimeout
        return try await withDeadline(timeout) {
            Failure(description: "fetching \(url) took longer than \(timeout.nanoseconds / 1_000_000) ms")
        } cancelled: {
            Failure(description: "fetching \(url) was cancelled")
        } _: { () async throws(Failure) in
            try await unboundedGet(url, accept: accept)
        }
    }

    private func unboundedGet(_ url: String, accept: String) async throws(Failure) -> (ByteBuffer, HTTPHeaders) {
        let target: RemoteURL
        do {
            target = try RemoteURL(url)
        } catch {
            throw Failure(description: "\(url.prefix(256)) is refused: \(error)")
        }
        guard target.isPermitted else { throw Failure(description: "\(url) is neither https nor http to a loopback host") }
        var request = HTTPClientRequest(url: url)
        request.method = .GET
        // The issue: fetch past any intermediate cache, so a rotated key set is seen at once.
        request.headers.add(name: "Cache-Control", value: "no-cache")
        request.headers.add(name: "Accept", value: accept)
        request.headers.add(name: "User-Agent", value: "keyholed")
        do {
            let response = try await client.execute(request, timeout: configuration.totalTimeout)
            guard response.status == .ok else {
                throw Failure(description: "\(url) answered HTTP \(response.status.code)")
            }
            do {
                return (try await response.body.collect(upTo: configuration.maximumBytes), response.headers)
            } catch {
                throw Failure(description: "\(url) sent more than \(configuration.maximumBytes) bytes, or broke off")
            }
        } catch let failure as Failure {
            throw failure
        } catch {
            throw Failure(description: "fetching \(url) failed: \(error)")
        }
    }
}
