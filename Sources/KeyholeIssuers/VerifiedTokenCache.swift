import KeyholeProtocol
import KeyholeJOSE
import NIOCore
import Synchronization

/// Tokens that verified, found by their bytes, so that a token seen again costs a lookup and a
/// comparison of its bytes instead of a signature check (issue 3, "Verified-token cache"). Each
/// entry holds its token's bytes (an identity token's 1-2 KiB) to compare them with, in constant
/// time (`TokenKey` says why not a digest), until it leaves the cache, when they are zeroed. So a
/// verified token stays in keyholed's memory until it expires at the latest (never on disk, nor in
/// a log).
///
/// Bounded: least recently used entries go first once `capacity` is reached, and an entry goes when
/// its token expires (`exp` plus leeway). An entry remembers the key object that verified its token;
/// the registry uses it only while that very key is still in its issuer's set, and a new key set
/// drops the entries of keys that left it. The checks that depend on the request (audience, nonce)
/// and the time are not cached: the registry runs them on every hit.
///
/// Split into shards with a lock each, so that event loops on different cores rarely wait for each other.
public final class VerifiedTokenCache: Sendable {
    /// A verified token and what vouches for it. A class: a hit hands it out with one reference
    /// count, not one for each of its token's strings and arrays.
    public final class Entry: Sendable {
        /// The configured name of the issuer whose key verified it.
        public let issuer: String
        /// Its claims.
        public let token: VerifiedToken
        /// The key that verified its signature.
        public let key: VerificationKey
        /// When it leaves the cache: `exp` plus the issuer's leeway, in seconds since 1970.
        public let evictAt: Double
        /// The answer for it, as the registry's encoder made it.
        public let encoded: ByteBuffer?
        /// The `IssuerKeys.serial` of the issuer object that verified it: after a reload replaced
        /// that object, the entry is never used again.
        public let keysSerial: UInt64

        /// An entry.
        public init(
            issuer: String, token: VerifiedToken, key: VerificationKey, evictAt: Double, encoded: ByteBuffer? = nil,
            keysSerial: UInt64 = 0
        ) {
            self.issuer = issuer
            self.token = token
            self.key = key
            self.evictAt = evictAt
            self.encoded = encoded
            self.keysSerial = keysSerial
        }
    }

    /// The most entries held.
    public let capacity: Int
    private let shards: [ShardBox]

    /// The default capacity.
    public static let defaultCapacity = 100_000

    /// A cache of at most `capacity` (at least 1) entries.
    public init(capacity: Int = defaultCapacity) {
        self.capacity = max(1, capacity)
        // Small caches keep one shard, so that their bound and eviction order are exact.
        let count = self.capacity < 4096 ? 1 : 16
        let perShard = (self.capacity + count - 1) / count
        shards = (0..<count).map { _ in ShardBox(capacity: perShard) }
    }

    private func shard(_ token: TokenKey) -> ShardBox {
        shards[Int(truncatingIfNeeded: token.key >> 48) % shards.count]
    }

    /// The entry for exactly the bytes of `token`, unless it has expired at `now` (then it is
    /// removed); marks it recently used.
    public func entry(for token: ByteBuffer, now: Double) -> Entry? {
        token.withUnsafeReadableBytes { bytes in
            let key = TokenKey(bytes)
            return shard(key).mutex.withLock { $0.entry(for: key, now: now) }
        }
    }

    /// Adds or replaces the entry for `token` (its bytes are copied), evicting the least recently
    /// used entry when full.
    public func insert(_ entry: Entry, for token: ByteBuffer) {
        token.withUnsafeReadableBytes { bytes in
            let key = TokenKey(bytes)
            shard(key).mutex.withLock { $0.insert(entry, for: key) }
        }
    }

    /// Removes every entry of `issuer` whose key is not in `keys`: run when a new key set comes in.
    public func removeEntries(of issuer: String, keptKeys keys: JWKSet) {
        for shard in shards {
            shard.mutex.withLock { $0.removeAll { ExactString.equal($0.issuer, issuer) && !keys.contains($0.key) } }
        }
    }

    /// How many entries it holds.
    public var count: Int { statistics.entries }

    /// Its counters, for `jwks.status`.
    public struct Statistics: Sendable, Equatable {
        /// Entries held now.
        public var entries = 0
        /// Lookups that found a live entry, and lookups that did not (expired entries included).
        public var hits = 0
        public var misses = 0
        /// Entries pushed out by newer ones because the cache was full.
        public var evictions = 0
    }

    /// The counters, summed over the shards.
    public var statistics: Statistics {
        shards.reduce(into: Statistics()) { total, shard in
            shard.mutex.withLock { shard in
                total.entries += shard.index.count
                total.hits += shard.hits
                total.misses += shard.misses
                total.evictions += shard.evictions
            }
        }
    }

    private final class ShardBox: Sendable {
        let mutex: Mutex<Shard>
        init(capacity: Int) { mutex = Mutex(Shard(capacity: capacity)) }
    }
}
