import Foundation
import KeyholeIssuers
import KeyholeJOSE
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Synchronization
import Testing

/// The hot key-set cache as it runs: a refresh loop on a manual clock fetching from a real HTTP server
/// on loopback that counts requests.
@Suite("IssuerKeys: the key-set cache against a real HTTP server")
struct IssuerKeysTests {
    typealias Harness = IssuerKeysHarness

    @Test("fetched at start; TTL from max-age, clamped; refreshed at 3/4 of it while requests keep verifying")
    func ttlAndBackgroundRefresh() async throws {
        try await Harness.run(reply: try Harness.reply("panva-wellknown-20241001", maxAge: 600)) { h in
            await h.keys.waitUntil { $0.usable }
            var status = h.keys.status()
            #expect(status.fetches == 1)
            #expect(status.kids == ["FftONTxoEg", "T8tIJ1zSrO", "pggnQeNCOU"])
            #expect(status.fetchedAt == Harness.start)
            #expect(status.expiresAt == Harness.start + 600)
            #expect(h.server.received.count == 1)
            // The loop arms its timer for the refresh at 3/4 of the time to live.
            await h.clock.waitForSleepers { $0.contains(Harness.start + 450) }
            #expect(h.keys.status().nextFetchAt == Harness.start + 450)

            h.server.hold()
            h.server.setReply(try Harness.reply("panva-wellknown-20241001", maxAge: 10))
            h.clock.advance(to: Harness.start + 450)
            await h.server.waitForRequests(2)
            // While the refresh is out, requests still have the keys: nobody waits for it.
            #expect(h.keys.status().fetching == "refresh")
            #expect(h.keys.verifier() != nil)
            h.server.release()
            await h.keys.waitUntil { $0.fetches == 2 && $0.fetching == nil }
            status = h.keys.status()
            // max-age=10 is clamped up to 5 minutes.
            #expect(status.expiresAt == Harness.start + 450 + 300)
            #expect(status.lastError == nil)

            // No max-age: 1 hour; a huge one is clamped to 24 hours.
            h.server.setReply(try Harness.reply("panva-wellknown-20241001"))
            h.clock.advance(to: Harness.start + 450 + 225)
            await h.keys.waitUntil { $0.fetches == 3 && $0.fetching == nil }
            #expect(h.keys.status().expiresAt == Harness.start + 675 + 3600)
            h.server.setReply(try Harness.reply("panva-wellknown-20241001", maxAge: 10_000_000))
            h.clock.advance(to: Harness.start + 675 + 2700)
            await h.keys.waitUntil { $0.fetches == 4 && $0.fetching == nil }
            #expect(h.keys.status().expiresAt == Harness.start + 3375 + 86_400)
            #expect(h.server.received.count == 4)
            #expect(h.server.received.allSatisfy { $0.headers["Cache-Control"] == ["no-cache"] })
        }
    }

    @Test("unknown kid: one fetch shared by every waiting request, then a 30 s cool-down that fails fast")
    func unknownKeySingleFlight() async throws {
        let (token, tokenTime) = try Harness.token()
        try await Harness.run(reply: try Harness.reply("panva-wellknown-20240605")) { h in
            await h.keys.waitUntil { $0.usable }
            let registry = IssuerRegistry(issuers: [h.keys], cache: VerifiedTokenCache())
            guard case .needsKeys(let keys, let error) = try registry.attempt(
                token: token, issuer: nil, audience: nil, nonce: nil, now: tokenTime)
            else {
                Issue.record("verified without its key")
                return
            }
            #expect(error.code == .tokenKeyUnknown)

            h.server.hold()
            h.server.setReply(try Harness.reply("panva-wellknown-20241001"))
            let results = Task {
                await withTaskGroup(of: String.self) { group in
                    for _ in 0..<16 {
                        group.addTask {
                            do throws(ProtocolError) {
                                return try await registry.verifyAfterFetch(
                                    of: keys, token: token, issuer: nil, audience: nil, nonce: nil, now: { tokenTime }
                                ).token.subject
                            } catch {
                                return error.code.rawValue
                            }
                        }
                    }
                    var subjects: [String] = []
                    for await subject in group { subjects.append(subject) }
                    return subjects
                }
            }
            // All sixteen wait on the one fetch the server holds.
            await h.keys.waitUntil { $0.waiting == 16 }
            await h.server.waitForRequests(2)
            #expect(h.server.received.count == 2)
            h.server.release()
            let subjects = await results.value
            #expect(subjects.count == 16)
            #expect(Set(subjects).count == 1 && subjects.first?.hasPrefix("token_") == false, "\(subjects)")
            #expect(h.server.received.count == 2)
            #expect(h.keys.status().fetches == 2)

            // A flood of tokens with a kid nobody has: within the cool-down, no fetch, an immediate answer.
            h.clock.advance(by: 29)
            for _ in 0..<100 {
                guard case .rateLimited(let retryAfter) = await h.keys.fetchForUnknownKey() else {
                    Issue.record("fetched within the cool-down")
                    return
                }
                #expect(abs(retryAfter - 1) < 0.001)
            }
            #expect(h.keys.status().fetches == 2)
            // After it, one more fetch is allowed.
            h.clock.advance(by: 1)
            #expect(await h.keys.fetchForUnknownKey() == .succeeded)
            #expect(h.server.received.count == 3)
        }
    }

    @Test("jwks.refresh shares the cool-down with unknown keys")
    func forcedRefresh() async throws {
        try await Harness.run(reply: try Harness.reply("panva-wellknown-20241001")) { h in
            await h.keys.waitUntil { $0.usable }
            #expect(await h.keys.refresh() == .succeeded)
            #expect(await h.keys.fetchForUnknownKey() == .rateLimited(retryAfter: 30))
            h.clock.advance(by: 30)
            h.server.setReply(LocalHTTPServer.Reply(status: .serviceUnavailable))
            guard case .failed(let message) = await h.keys.refresh() else {
                Issue.record("a failed fetch reported as something else")
                return
            }
            #expect(message.contains("503"))
            #expect(h.server.received.count == 3)
        }
    }

    @Test("a refresh of an unchanged key set makes no key; a rotation makes only the new one (issue 26)")
    func refreshReusesKeys() async throws {
        try await Harness.run(reply: try Harness.reply("panva-wellknown-20241001")) { h in
            let sets = Mutex<[JWKSet]>([])
            h.keys.onKeysChanged { set in sets.withLock { $0.append(set) } }
            await h.keys.waitUntil { $0.usable }
            let first = try #require(h.keys.verifier()).signatures.keys
            #expect(first.built == 3)
            #expect(await h.keys.refresh() == .succeeded)
            let refreshed = try #require(sets.withLock { $0.last })
            #expect(refreshed.built == 0)
            #expect(refreshed.keys.count == 3 && zip(first.keys, refreshed.keys).allSatisfy { $0 === $1 })

            // Apple's June 2024 set of four shares one key (pggnQeNCOU) with October's: three are made.
            h.server.setReply(try Harness.reply("panva-wellknown-20240605"))
            h.clock.advance(by: 30)
            #expect(await h.keys.refresh() == .succeeded)
            let rotated = try #require(sets.withLock { $0.last })
            let shared = rotated.keys.filter { key in first.keys.contains { $0 === key } }
            #expect(shared.map(\.kid) == ["pggnQeNCOU"])
            #expect(rotated.keys.count == 4 && rotated.built == 3)
        }
    }

    @Test("an outage: the last good keys serve for up to 7 days, with retries and the error in the status")
    func staleKeysDuringOutage() async throws {
        let (token, tokenTime) = try Harness.token()
        try await Harness.run(reply: try Harness.reply("panva-wellknown-20241001", maxAge: 600)) { h in
            await h.keys.waitUntil { $0.usable }
            let registry = IssuerRegistry(issuers: [h.keys], cache: nil)
            h.server.setReply(LocalHTTPServer.Reply(status: .internalServerError))
            // Past expiry: the refresh and a retry fail; the keys still verify.
            h.clock.advance(to: Harness.start + 601)
            await h.keys.waitUntil { $0.failures >= 1 && $0.fetching == nil }
            var status = h.keys.status()
            #expect(status.usable)
            #expect(status.lastError?.contains("HTTP 500") == true)
            // The retry comes within 0.5 to 1 s (the first backoff step, with jitter).
            let retry = try #require(status.nextFetchAt)
            #expect(retry >= Harness.start + 601.5 && retry <= Harness.start + 602)
            #expect(try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: tokenTime).issuer == "apple")

            // A week after the fetch, the keys are too stale to use.
            h.clock.advance(to: Harness.start + 7 * 86_400 + 1)
            await h.keys.waitUntil { $0.failures >= 2 && $0.fetching == nil }
            status = h.keys.status()
            #expect(!status.usable)
            #expect(h.keys.verifier() == nil)
            #expect(throws: ProtocolError(code: .keysUnavailable, message: "")) {
                try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: tokenTime)
            }
            // Backoff has grown, capped at 5 minutes.
            #expect(try #require(status.nextFetchAt) - h.clock.now() <= 300)

            // The issuer is back: the next retry brings the keys.
            h.server.setReply(try Harness.reply("panva-wellknown-20241001"))
            h.clock.advance(to: try #require(status.nextFetchAt))
            await h.keys.waitUntil { $0.usable }
            #expect(h.keys.status().lastError == nil)
        }
    }

    @Test("persisted keys: a restart while the issuer is down still verifies")
    func persistedKeysAtStartUp() async throws {
        let (token, tokenTime) = try Harness.token()
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keyhole-keys-\(UUID())").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let store = KeySetStore(stateDirectory: directory)
        let server = try await LocalHTTPServer(reply: try Harness.reply("panva-wellknown-20241001", maxAge: 600))
        try await Harness.run(reply: .init(), store: store, server: server) { h in
            await h.keys.waitUntil { $0.usable }
        }
        let url = server.url
        try await server.close()

        let persisted = try #require(try store.load(Harness.apple(url: url)))
        #expect(persisted.fetchedAt == Harness.start)
        #expect(persisted.expiresAt == Harness.start + 600)
        // The new run's server is down (its port closed): only the persisted copy can verify.
        let restarted: (Harness) async throws -> Void = { h in
            #expect(h.keys.verifier() != nil)
            let registry = IssuerRegistry(issuers: [h.keys], cache: nil)
            let verified = try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: tokenTime)
            #expect(verified.issuer == "apple")
            // Still fresh: no fetch at start, a refresh armed at 3/4 of the persisted TTL.
            await h.clock.waitForSleepers { $0.contains(Harness.start + 450) }
            #expect(h.keys.status().fetches == 0)
            h.clock.advance(to: Harness.start + 450)
            await h.keys.waitUntil { $0.failures == 1 && $0.fetching == nil }
            let again = try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: tokenTime)
            #expect(again.issuer == "apple")
        }
        try await Harness.run(reply: .init(), configuration: { _ in Harness.apple(url: url) }, persisted: persisted, restarted)
    }

    @Test("a key that leaves the set stops verifying once the new set is in, and its cached tokens go")
    func keyRemoval() async throws {
        let (token, tokenTime) = try Harness.token()
        try await Harness.run(reply: try Harness.reply("unresolved-ruby-2025")) { h in
            await h.keys.waitUntil { $0.usable }
            let cache = VerifiedTokenCache()
            let registry = IssuerRegistry(issuers: [h.keys], cache: cache)
            #expect(try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: tokenTime).issuer == "apple")
            #expect(cache.count == 1)
            // A refetch of the same keys keeps the entry (the key objects are kept).
            #expect(await h.keys.refresh() == .succeeded)
            #expect(cache.count == 1)
            _ = try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: tokenTime)
            #expect(cache.statistics.hits == 1)

            h.server.setReply(try Harness.reply("panva-wellknown-20240605"))
            h.clock.advance(by: 30)
            #expect(await h.keys.refresh() == .succeeded)
            #expect(cache.count == 0)
            #expect(throws: ProtocolError(code: .tokenKeyUnknown, message: "")) {
                try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: tokenTime)
            }
        }
    }

    @Test("a reload: an issuer carried over with new rules keeps its keys, not the tokens cached by the object it replaced; the old object fetches no more")
    func replacedIssuer() async throws {
        let (token, tokenTime) = try Harness.token()
        try await Harness.run(reply: try Harness.reply("unresolved-ruby-2025")) { (h: IssuerKeysHarness) async throws in
            await h.keys.waitUntil { $0.usable }
            let cache = VerifiedTokenCache()
            let registry = IssuerRegistry(issuers: [h.keys], cache: cache)
            #expect(try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: tokenTime).issuer == "apple")
            #expect(cache.count == 1)

            // Only ES256 now: the cached entry (which remembers no algorithm) must not vouch for the RS256 token.
            var narrower = h.keys.configuration
            narrower.algorithms = [.es256]
            let replacement = IssuerKeys(configuration: narrower, continuing: h.keys)
            #expect(replacement.serial != h.keys.serial)
            #expect(replacement.verifier() != nil)
            registry.replaceIssuers([replacement])
            #expect(registry.issuers.count == 1 && registry.issuers[0] === replacement)
            // The cached entry names the old object: it is not used, and the new rules apply.
            #expect(throws: ProtocolError(code: .tokenAlgNotAllowed, message: "")) {
                try registry.verify(token: token, issuer: nil, audience: nil, nonce: nil, now: tokenTime)
            }
            // The retired object's loop ends: a fetch asked of it is answered, never made.
            let fetches = h.server.received.count
            h.clock.advance(by: 60)
            #expect(await h.keys.refresh() == .notFetched)
            #expect(h.server.received.count == fetches)
        }
    }

    @Test("a set with no usable key, or not a key set, does not replace the last good one")
    func unusableSetsKeepTheLastGood() async throws {
        try await Harness.run(reply: try Harness.reply("panva-wellknown-20241001")) { h in
            await h.keys.waitUntil { $0.usable }
            for (index, body) in [#"{"keys":[]}"#, #"{"keys":[{"kty":"oct","k":"c2VjcmV0"}]}"#, "<html>"].enumerated() {
                h.server.setReply(LocalHTTPServer.Reply(body: Array(body.utf8)))
                h.clock.advance(by: 30)
                guard case .failed = await h.keys.refresh() else {
                    Issue.record("\(body) was taken as a key set")
                    continue
                }
                let status = h.keys.status()
                #expect(status.kids == ["FftONTxoEg", "T8tIJ1zSrO", "pggnQeNCOU"])
                #expect(status.failures == index + 1)
            }
        }
    }
}
