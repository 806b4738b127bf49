extension VerifiedTokenCache {
    /// A token as the cache looks it up: its bytes, in place, and the index key made of them.
    ///
    /// The index key only finds the one candidate entry; a hit needs the whole token equal to the
    /// one that verified (`Shard`). So the key need not be a cryptographic digest, and is not: a
    /// SHA-256 of an 800-byte token was a quarter of a cached verification's CPU on a machine
    /// without SHA extensions. It is the process's seeded `Hasher` over the token's length and its
    /// last bytes, which are its signature's: unpredictable for every token that can verify, so
    /// cached tokens spread over the index. A token made to share a cached one's key is a miss (and
    /// then verified in full); two verified tokens that share one are a miss for the older one.
    struct TokenKey {
        /// Valid only while the buffer it was made from is.
        let bytes: UnsafeRawBufferPointer
        let key: UInt64

        /// Bytes of a token's end that the key is made of: about 92 bits of any signature's letters
        /// (RS256's has 342, ES256's 86; the last letter carries 2 or 4 bits), which no one can choose
        /// for a token that verifies. More cost more:
        /// hashing 64 was 1.8 % of a cached verification's CPU.
        static let hashedTail = 16

        init(_ bytes: UnsafeRawBufferPointer) {
            self.bytes = bytes
            var hasher = Hasher()
            hasher.combine(bytes.count)
            hasher.combine(bytes: UnsafeRawBufferPointer(rebasing: bytes.suffix(Self.hashedTail)))
            key = UInt64(truncatingIfNeeded: hasher.finalize())
        }
    }
}
