import KeyholeIssuers
import KeyholeJOSE
import KeyholeProtocol
import NIOCore
import Testing

/// The bounded LRU of verified tokens, without I/O.
@Suite("VerifiedTokenCache")
struct VerifiedTokenCacheTests {
    static let keys = try! JWKSet(json: IssuerKeysHarness.document("panva-wellknown-20241001"))

    static func token(_ subject: String, exp: Int64) throws -> VerifiedToken {
        let policy = ClaimsPolicy(issuer: "https://issuer", audiences: ["client"])
        return try ClaimsValidator.validate(
            claims: ["iss": "https://issuer", "sub": .string(subject), "aud": "client", "exp": .int(exp)],
            policy: policy, now: 0, audience: nil, nonce: nil)
    }

    static func entry(_ subject: String, exp: Int64 = 1000, key: Int = 0, issuer: String = "i") throws -> VerifiedTokenCache.Entry {
        .init(issuer: issuer, token: try token(subject, exp: exp), key: keys.keys[key], evictAt: Double(exp))
    }

    @Test("bounded: the least recently used entry goes first")
    func leastRecentlyUsed() throws {
        let cache = VerifiedTokenCache(capacity: 3)
        let tokens = (0..<5).map { ByteBuffer(string: "token \($0)") }
        for index in 0..<3 { cache.insert(try Self.entry("s\(index)"), for: tokens[index]) }
        // Touch 0, so 1 is now the oldest.
        #expect(cache.entry(for: tokens[0], now: 1)?.token.subject == "s0")
        cache.insert(try Self.entry("s3"), for: tokens[3])
        #expect(cache.count == 3)
        #expect(cache.entry(for: tokens[1], now: 1) == nil)
        #expect(cache.entry(for: tokens[2], now: 1)?.token.subject == "s2")
        cache.insert(try Self.entry("s4"), for: tokens[4])
        #expect(cache.entry(for: tokens[0], now: 1) == nil)
        #expect(cache.entry(for: tokens[3], now: 1)?.token.subject == "s3")
        #expect(cache.entry(for: tokens[4], now: 1)?.token.subject == "s4")
        let statistics = cache.statistics
        #expect(statistics.entries == 3 && statistics.hits == 4 && statistics.misses == 2 && statistics.evictions == 2)
    }

    @Test("an entry goes when its token expires; replacing keeps one entry")
    func expiry() throws {
        let cache = VerifiedTokenCache(capacity: 10)
        let token = ByteBuffer(string: "token")
        cache.insert(try Self.entry("a", exp: 100), for: token)
        cache.insert(try Self.entry("b", exp: 100), for: token)
        #expect(cache.count == 1)
        #expect(cache.entry(for: token, now: 99.9)?.token.subject == "b")
        #expect(cache.entry(for: token, now: 100) == nil)
        #expect(cache.count == 0)
        cache.insert(try Self.entry("c", exp: 100), for: token)
        #expect(cache.entry(for: token, now: .nan) == nil)
    }

    @Test("a new key set drops the entries of its issuer's keys that left, and only those")
    func keyRemoval() throws {
        let cache = VerifiedTokenCache()
        for index in 0..<300 {
            cache.insert(try Self.entry("s\(index)", key: index % 3, issuer: index % 2 == 0 ? "a" : "b"), for: ByteBuffer(string: "t\(index)"))
        }
        #expect(cache.count == 300)
        // Issuer a keeps keys 0 and 1: its 50 entries of key 2 go.
        cache.removeEntries(of: "a", keptKeys: JWKSet(keys: Array(Self.keys.keys.prefix(2))))
        #expect(cache.count == 250)
        for index in 0..<300 {
            let present = cache.entry(for: ByteBuffer(string: "t\(index)"), now: 0) != nil
            #expect(present == !(index % 2 == 0 && index % 3 == 2))
        }
    }

    @Test("many shards at the default size: the bound holds")
    func bound() throws {
        let cache = VerifiedTokenCache(capacity: 5000)
        let entry = try Self.entry("s")
        for index in 0..<20_000 { cache.insert(entry, for: ByteBuffer(string: "t\(index)")) }
        #expect(cache.count <= 5000 + 16)
        #expect(cache.count >= 4000)
    }

    @Test("a hit needs the very bytes that verified: a token sharing a cached one's length and end is a miss")
    func exactBytes() throws {
        let cache = VerifiedTokenCache(capacity: 10)
        // The index key is made of a token's length and its last bytes (TokenKey): these two share it.
        let tail = String(repeating: "s", count: 100)
        let verified = "eyJhIjoxfQ.payload-one." + tail, forged = "eyJhIjoxfQ.payload-two." + tail
        cache.insert(try Self.entry("a"), for: ByteBuffer(string: verified))
        #expect(cache.entry(for: ByteBuffer(string: forged), now: 1) == nil)
        // The same bytes anywhere (a slice of a request's frame) are found.
        var frame = ByteBuffer(string: "{\"token\":\"" + verified + "\"}")
        frame.moveReaderIndex(forwardBy: 10)
        let slice = frame.readSlice(length: verified.utf8.count)!
        #expect(cache.entry(for: slice, now: 1)?.token.subject == "a")
        // One byte off anywhere, or one byte more or less, is a miss.
        for index in 0..<verified.utf8.count {
            var bytes = Array(verified.utf8)
            bytes[index] ^= 0x01
            #expect(cache.entry(for: ByteBuffer(bytes: bytes), now: 1) == nil)
        }
        #expect(cache.entry(for: ByteBuffer(string: verified + "s"), now: 1) == nil)
        #expect(cache.entry(for: ByteBuffer(string: String(verified.dropFirst())), now: 1) == nil)
        // Verified too, the other one takes the index key's place: it is found by its bytes, and the
        // first one is a miss from then on (verified in full again).
        cache.insert(try Self.entry("b"), for: ByteBuffer(string: forged))
        #expect(cache.entry(for: ByteBuffer(string: forged), now: 1)?.token.subject == "b")
        #expect(cache.entry(for: ByteBuffer(string: verified), now: 1) == nil)
        #expect(cache.count == 1)
    }
}
