/// What the session index needs of the elements it points at: their id.
protocol SessionIdentified {
    var id: SessionID { get }
}

/// The index of the session table: from a session id to its slot, by open addressing with linear
/// probing and deletion by backward shift (no tombstones, so lookups stay short however much churn).
///
/// A bucket is 8 bytes: a 32-bit hash of the id and the slot. Probes compare hashes, and only a match
/// reads the slot to compare ids, so a lookup touches the slot array once; growing and removing never
/// do. That is about 16 bytes per session, where a `[SessionID: UInt32]` takes about 27 and runs
/// SipHash on every key. The hash comes straight from the id's bits instead, which is safe because
/// ids are SHA-256 of tokens keyholed drew from the CSPRNG: nobody can choose where an id lands. A
/// chosen lookup (a made-up token) only probes; it never inserts.
struct SessionIndex: Sendable {
    /// An unused bucket (no slot is `UInt32.max`).
    private static let empty = UInt64.max
    /// The most a table holds, in quarters of its buckets: lookups that miss stay a few probes long.
    private static let maximumLoadQuarters = 3

    /// Each used bucket: the id's hash in the high half, the slot in the low half.
    private var buckets: [UInt64]
    /// log2 of the bucket count (at most 32: the home bucket is the top bits of the hash).
    private var bits: Int
    /// Sessions indexed.
    private(set) var count = 0

    /// An index with room for `capacity` sessions before it grows.
    init(capacity: Int = 0) {
        bits = Self.bits(for: capacity)
        buckets = Array(repeating: Self.empty, count: 1 << bits)
    }

    /// The fewest bits (at least 4) whose table holds `count` sessions.
    private static func bits(for count: Int) -> Int {
        var bits = 4
        while (1 << bits) * maximumLoadQuarters / 4 < count { bits += 1 }
        return bits
    }

    /// The id's high word spread by a Fibonacci multiplication (so that even ids that are not random,
    /// in tests, fill the table evenly), top 32 bits.
    @inline(__always)
    private static func hash(_ id: SessionID) -> UInt64 { (id.high &* 0x9E37_79B9_7F4A_7C15) >> 32 }

    /// The bucket a hash starts probing at.
    @inline(__always)
    private func home(_ hash: UInt64) -> Int { Int(truncatingIfNeeded: hash >> UInt64(32 - bits)) }

    @inline(__always)
    private func after(_ bucket: Int) -> Int { (bucket + 1) & (buckets.count - 1) }

    /// The bucket holding `id`, if indexed.
    private func bucket<Element: SessionIdentified>(of id: SessionID, in elements: SlotArray<Element>) -> Int? {
        let hash = Self.hash(id)
        var bucket = home(hash)
        while true {
            let entry = buckets[bucket]
            if entry == Self.empty { return nil }
            if entry >> 32 == hash && elements[UInt32(truncatingIfNeeded: entry)].id == id { return bucket }
            bucket = after(bucket)
        }
    }

    /// The slot of `id` among `elements`, if indexed.
    func find<Element: SessionIdentified>(_ id: SessionID, in elements: SlotArray<Element>) -> UInt32? {
        bucket(of: id, in: elements).map { UInt32(truncatingIfNeeded: buckets[$0]) }
    }

    /// Indexes `slot`, whose element (already in `elements`) has an id not indexed yet.
    mutating func insert<Element: SessionIdentified>(_ slot: UInt32, in elements: SlotArray<Element>) {
        if (count + 1) * 4 > buckets.count * Self.maximumLoadQuarters { rehash(bits: bits + 1) }
        place(Self.hash(elements[slot].id) << 32 | UInt64(slot))
        count += 1
    }

    private mutating func place(_ entry: UInt64) {
        var bucket = home(entry >> 32)
        while buckets[bucket] != Self.empty { bucket = after(bucket) }
        buckets[bucket] = entry
    }

    /// Takes `id` out of the index; returns its slot, or `nil` when it was not indexed.
    mutating func remove<Element: SessionIdentified>(_ id: SessionID, in elements: SlotArray<Element>) -> UInt32? {
        guard var hole = bucket(of: id, in: elements) else { return nil }
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

    /// Grows the table to hold `capacity` sessions without growing again.
    mutating func reserve(_ capacity: Int) {
        let needed = Self.bits(for: capacity)
        if needed > bits { rehash(bits: needed) }
    }

    private mutating func rehash(bits newBits: Int) {
        precondition(newBits <= 32, "a session index over 2^32 buckets")
        let old = buckets
        bits = newBits
        buckets = Array(repeating: Self.empty, count: 1 << newBits)
        for entry in old where entry != Self.empty { place(entry) }
    }
}
