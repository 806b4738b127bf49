/// A key a `SlotIndex` can find elements by: equality, and 32 well-mixed bits of hash.
protocol SlotIndexKey: Equatable {
    /// The hash: the high 32 bits are used.
    var indexHash: UInt64 { get }
}

/// What a `SlotIndex` needs of the elements it points at: their key.
protocol SlotIndexed {
    associatedtype Key: SlotIndexKey
    var indexKey: Key { get }
}

extension SessionID: SlotIndexKey {
    /// The high word spread by a Fibonacci multiplication (so that even ids that are not random, in
    /// tests, fill a table evenly). No secret seed is needed: ids are SHA-256 of tokens keyholed drew
    /// from the CSPRNG, so nobody can choose where one lands; a chosen lookup (a made-up token) only
    /// probes, it never inserts.
    var indexHash: UInt64 { high &* 0x9E37_79B9_7F4A_7C15 }
}

extension Principal: SlotIndexKey {
    /// Swift's hash, seeded per process: subjects come from callers, who must not be able to pile
    /// them into one run of buckets.
    var indexHash: UInt64 { UInt64(UInt(bitPattern: hashValue)) }
}

/// An index from a key to the slot of the element holding it (sessions by id, principals by issuer
/// and sub), by open addressing with linear probing and deletion by backward shift (no tombstones,
/// so lookups stay short however much churn).
///
/// A bucket is 8 bytes: 32 bits of the key's hash and the slot. Probes compare hashes, and only a
/// match reads the slot to compare keys, so a lookup touches the slot array about once; growing and
/// removing never do. That is about 16 bytes per entry, where a `[SessionID: UInt32]` takes about 27
/// and a `[Principal: UInt32]` about 48, and compares whole keys on every probe.
struct SlotIndex<Key: SlotIndexKey>: Sendable {
    /// An unused bucket (no slot is `UInt32.max`).
    private static var empty: UInt64 { UInt64.max }
    /// The most a table holds, in quarters of its buckets: lookups that miss stay a few probes long.
    private static var maximumLoadQuarters: Int { 3 }

    /// Each used bucket: the key's hash in the high half, the slot in the low half.
    private var buckets: [UInt64]
    /// log2 of the bucket count (at most 32: the home bucket is the top bits of the hash).
    private var bits: Int
    /// Entries indexed.
    private(set) var count = 0

    /// An index with room for `capacity` entries before it grows.
    init(capacity: Int = 0) {
        bits = Self.bits(for: capacity)
        buckets = Array(repeating: Self.empty, count: 1 << bits)
    }

    /// The fewest bits (at least 4) whose table holds `count` entries.
    private static func bits(for count: Int) -> Int {
        var bits = 4
        while (1 << bits) * maximumLoadQuarters / 4 < count { bits += 1 }
        return bits
    }

    @inline(__always)
    private static func hash(_ key: Key) -> UInt64 { key.indexHash >> 32 }

    /// The bucket a hash starts probing at.
    @inline(__always)
    private func home(_ hash: UInt64) -> Int { Int(truncatingIfNeeded: hash >> UInt64(32 - bits)) }

    @inline(__always)
    private func after(_ bucket: Int) -> Int { (bucket + 1) & (buckets.count - 1) }

    /// The bucket holding `key`, if indexed.
    private func bucket<Element: SlotIndexed>(of key: Key, in elements: SlotArray<Element>) -> Int? where Element.Key == Key {
        let hash = Self.hash(key)
        var bucket = home(hash)
        while true {
            let entry = buckets[bucket]
            if entry == Self.empty { return nil }
            if entry >> 32 == hash && elements[UInt32(truncatingIfNeeded: entry)].indexKey == key { return bucket }
            bucket = after(bucket)
        }
    }

    /// The slot of `key` among `elements`, if indexed.
    func find<Element: SlotIndexed>(_ key: Key, in elements: SlotArray<Element>) -> UInt32? where Element.Key == Key {
        bucket(of: key, in: elements).map { UInt32(truncatingIfNeeded: buckets[$0]) }
    }

    /// Indexes `slot`, whose element (already in `elements`) has a key not indexed yet.
    mutating func insert<Element: SlotIndexed>(_ slot: UInt32, in elements: SlotArray<Element>) where Element.Key == Key {
        if (count + 1) * 4 > buckets.count * Self.maximumLoadQuarters { rehash(bits: bits + 1) }
        place(Self.hash(elements[slot].indexKey) << 32 | UInt64(slot))
        count += 1
    }

    private mutating func place(_ entry: UInt64) {
        var bucket = home(entry >> 32)
        while buckets[bucket] != Self.empty { bucket = after(bucket) }
        buckets[bucket] = entry
    }

    /// Takes `key` out of the index; returns its slot, or `nil` when it was not indexed. Its element
    /// must still hold it.
    mutating func remove<Element: SlotIndexed>(_ key: Key, in elements: SlotArray<Element>) -> UInt32? where Element.Key == Key {
        guard var hole = bucket(of: key, in: elements) else { return nil }
        let removed = UInt32(truncatingIfNeeded: buckets[hole])
        // Pull back each later entry of the run that may move into the hole without landing before
        // its home bucket, so that every entry stays reachable from its home without tombstones.
        let mask = buckets.count - 1
        var next = after(hole)
        while buckets[next] != Self.empty {
            let home = home(buckets[next] >> 32)
            if (next - home) & mask >= (next - hole) & mask {
                buckets[hole] = buckets[next]
                hole = next
            }
            next = after(next)
        }
        buckets[hole] = Self.empty
        count -= 1
        return removed
    }

    /// Grows the table to hold `capacity` entries without growing again.
    mutating func reserve(_ capacity: Int) {
        let needed = Self.bits(for: capacity)
        if needed > bits { rehash(bits: needed) }
    }

    private mutating func rehash(bits newBits: Int) {
        precondition(newBits <= 32, "an index over 2^32 buckets")
        let old = buckets
        bits = newBits
        buckets = Array(repeating: Self.empty, count: 1 << newBits)
        for entry in old where entry != Self.empty { place(entry) }
    }
}
