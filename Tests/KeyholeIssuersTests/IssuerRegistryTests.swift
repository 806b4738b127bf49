import Foundation
import KeyholeIssuers
import KeyholeJOSE
import KeyholeProtocol
import NIOCore
import Testing

@Suite("IssuerRegistry")
struct IssuerRegistryTests {
    static let apple = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("KeyholeJOSETests/Fixtures/apple")

    let token: String
    let now: Double
    let keys: JWKSet

    init() throws {
        token = try String(contentsOf: Self.apple.appendingPathComponent("apple_token_4.jwt"), encoding: .utf8)
            .filter { !$0.isWhitespace }
        let claims = try JSONValue.parse(ByteBuffer(bytes: try CompactJWS.parse(token).payload))
        now = Double(claims["iat"]!.intValue!) + 60
        keys = try KeySetFile.load(Self.apple.appendingPathComponent("apple_jwks_panva-wellknown-20241001.json").path)
    }

    func appleIssuer(name: String = "apple") -> IssuerConfiguration {
        var issuer = IssuerPreset.apple.configuration(name: name, audiences: ["dev.timc.siwa-demo.TILiOS"])
        issuer.keySet = .file("unused")
        return issuer
    }

    func google() -> IssuerConfiguration {
        IssuerPreset.google.configuration(name: "google", audiences: ["1234.apps.googleusercontent.com"])
    }

    @Test("a token goes to the issuer named in the request, else to the one whose iss it carries")
    func routing() throws {
        let registry = IssuerRegistry(issuers: [google(), appleIssuer()], keySets: ["apple": keys, "google": keys])
        #expect(try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: now).issuer == "apple")
        #expect(try registry.verify(token: token, issuer: "apple", audience: nil, nonce: nil, now: now).issuer == "apple")
        // Named as Google's: the iss is not Google's.
        #expect(throws: ProtocolError(code: .tokenIssuerUnknown, message: "")) {
            try registry.verify(token: token, issuer: "google", audience: nil, nonce: nil, now: now)
        }
        #expect(throws: ProtocolError(code: .tokenIssuerUnknown, message: "")) {
            try registry.verify(token: token, issuer: "nobody", audience: nil, nonce: nil, now: now)
        }
    }

    @Test("the issuer named in a request is a configured name byte for byte, also for a cached token")
    func issuerNamesByBytes() throws {
        let nfc = "caf\u{E9}", nfd = "cafe\u{301}"
        #expect(nfc == nfd)
        let registry = IssuerRegistry(
            issuers: [IssuerKeys(configuration: appleIssuer(name: nfc), keys: keys)], cache: VerifiedTokenCache(capacity: 16))
        #expect(try registry.verify(token: token, issuer: nfc, audience: nil, nonce: nil, now: now).issuer == nfc)
        // The second time from the verified-token cache, which compares the name on its own path.
        for _ in 0..<2 {
            #expect(throws: ProtocolError(code: .tokenIssuerUnknown, message: "")) {
                try registry.verify(token: token, issuer: nfd, audience: nil, nonce: nil, now: now)
            }
        }
    }

    @Test("an issuer without keys yet answers keys_unavailable with a retry hint")
    func keysUnavailable() {
        let registry = IssuerRegistry(issuers: [appleIssuer()], keySets: [:])
        do {
            _ = try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: now)
            Issue.record("verified without keys")
        } catch {
            #expect(error.code == .keysUnavailable)
            #expect(error.retryAfterMs != nil)
        }
    }

    @Test("JOSE errors keep their codes on the wire")
    func errorCodes() {
        let registry = IssuerRegistry(issuers: [appleIssuer()], keySets: ["apple": keys])
        #expect(throws: ProtocolError(code: .tokenExpired, message: "")) {
            try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: now + 86_400 * 2)
        }
        #expect(throws: ProtocolError(code: .tokenMalformed, message: "")) {
            try registry.verify(token: "x", issuer: nil, audience: nil, nonce: nil, now: now)
        }
    }

    @Test("a cached token is checked again on every hit: issuer named, audience, nonce, time")
    func cachedTokensAreRechecked() throws {
        var apple = appleIssuer()
        apple.audiences.insert("com.example.web")
        let cache = VerifiedTokenCache()
        let registry = IssuerRegistry(
            issuers: [IssuerKeys(configuration: apple, keys: keys), IssuerKeys(configuration: google(), keys: keys)],
            cache: cache)
        #expect(try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: now).token.subject.isEmpty == false)
        #expect(cache.count == 1 && cache.statistics.hits == 0)
        #expect(try registry.verify(token: token, issuer: "apple", audience: "dev.timc.siwa-demo.TILiOS", nonce: nil, now: now).issuer == "apple")
        #expect(cache.statistics.hits == 1)
        let refusals: [(String?, String?, String?, Double, ProtocolError.Code)] = [
            ("google", nil, nil, now, .tokenIssuerUnknown),
            (nil, "com.example.web", nil, now, .tokenAudienceInvalid),
            (nil, "com.unknown", nil, now, .tokenAudienceInvalid),
            (nil, nil, "not the nonce", now, .tokenNonceMismatch),
            (nil, nil, nil, now - 3600, .tokenNotYetValid),
        ]
        for (issuer, audience, nonce, time, code) in refusals {
            #expect(throws: ProtocolError(code: code, message: "")) {
                try registry.verify(token: token, issuer: issuer, audience: audience, nonce: nonce, now: time)
            }
        }
        // Every lookup found the entry (the one naming Google then went the whole way, and failed there).
        #expect(cache.statistics.hits == 6)
        #expect(throws: ProtocolError(code: .tokenExpired, message: "")) {
            try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: now + 86_400 * 2)
        }
        #expect(cache.count == 0)
    }

    @Test("a token changed where the cache's index key does not look is verified in full, never served from the cache")
    func cacheNeedsTheVeryToken() throws {
        let cache = VerifiedTokenCache()
        let registry = IssuerRegistry(issuers: [IssuerKeys(configuration: appleIssuer(), keys: keys)], cache: cache)
        _ = try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: now)
        #expect(cache.count == 1)
        // One character of the payload changed: the same length and the same signature, so the
        // same index key (VerifiedTokenCache.TokenKey), but not the token that verified.
        var bytes = Array(token.utf8)
        let inPayload = bytes.firstIndex(of: UInt8(ascii: "."))! + 10
        bytes[inPayload] = bytes[inPayload] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
        let changed = String(decoding: bytes, as: UTF8.self)
        #expect(throws: ProtocolError(code: .tokenSignatureInvalid, message: "")) {
            // Named, so that the changed payload's iss does not decide where it goes.
            try registry.verify(token: changed, issuer: "apple", audience: nil, nonce: nil, now: now)
        }
        #expect(cache.statistics.hits == 0 && cache.statistics.misses == 2)
        // The token itself is still served from the cache, as its bytes, wherever they lie.
        var frame = ByteBuffer(string: "{\"token\":\"\(token)\"}")
        frame.moveReaderIndex(forwardBy: 10)
        let slice = frame.readSlice(length: token.utf8.count)!
        guard case .verified(let verification) = try registry.attempt(token: slice, issuer: nil, audience: nil, nonce: nil, now: now) else {
            Issue.record("the cached token was not verified")
            return
        }
        #expect(verification.issuer == "apple" && cache.statistics.hits == 1)
    }

    @Test("presets: Apple's and Google's issuers, key-set URLs and algorithms")
    func presets() {
        let apple = IssuerPreset.apple.configuration(name: "a", audiences: ["x"])
        #expect(apple.issuer == "https://appleid.apple.com")
        #expect(apple.keySet == .url("https://appleid.apple.com/auth/keys"))
        #expect(apple.algorithms == [.rs256])
        let google = google()
        #expect(google.policy.acceptsIssuer("https://accounts.google.com"))
        #expect(google.policy.acceptsIssuer("accounts.google.com"))
        #expect(!google.policy.acceptsIssuer("https://accounts.google.com/"))
        #expect(google.keySet == .url("https://www.googleapis.com/oauth2/v3/certs"))
    }

    @Test("a key-set file that is missing, not JSON or without usable keys is refused")
    func keySetFiles() throws {
        #expect(throws: KeySetFile.Failure.self) { try KeySetFile.load("/nonexistent/keys.json") }
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("khks-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        for (name, text) in [("bad.json", "not json"), ("empty.json", #"{"keys":[{"kty":"oct","k":"AAAA"}]}"#)] {
            let path = directory.appendingPathComponent(name)
            try text.write(to: path, atomically: true, encoding: .utf8)
            #expect(throws: KeySetFile.Failure.self) { try KeySetFile.load(path.path) }
        }
    }
}
