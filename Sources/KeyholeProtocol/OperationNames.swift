/// A server's operation names, looked up by their bytes: `Request.parse` finds a request's `op` in
/// the frame without making a `String` of it or hashing one, and a name matches only a name of the
/// same bytes (a `String` dictionary also matches canonically equivalent text: a Kelvin sign for "K").
///
/// An open-addressing table of at least twice as many slots as names, FNV-1a over the name's bytes
/// for the slot, and the bytes compared for the match: one pass over the `op`'s few bytes to hash,
/// one to compare. A class, so that handing the table to each parse costs one reference, not four.
/// Package-wide, not public: it is the server's, and KeyholeProtocol is also the clients' library.
package final class OperationNames: @unchecked Sendable {
    // @unchecked: every stored property is set by `init` and never changed; the pointers' memory is
    // written there only, read by any thread after, and freed by `deinit`.

    /// The names, in the order given; a lookup answers an index into them. Made from `strings`, for
    /// set-up and tests: a request reads one with `name(at:)`.
    package var names: [String] { Array(UnsafeBufferPointer(start: strings, count: count)) }
    private let count: Int
    /// The lookup's memory, read through pointers rather than arrays: reading an array's element
    /// from a class retained and released its buffer (two of each per lookup, and one more pair to
    /// copy a name out of `names`: about 80 of ping's 5 500 instructions, counted by callgrind).
    /// Index + 1 of the name in each of `mask + 1` slots; 0 for an empty slot.
    private let slots: UnsafeMutablePointer<Int32>
    private let mask: Int
    /// Name `i`'s bytes lie at `bytes + starts[i]`, `counts[i]` of them, one name after another.
    private let starts: UnsafeMutablePointer<Int>
    private let counts: UnsafeMutablePointer<Int>
    private let bytes: UnsafeMutablePointer<UInt8>
    /// The names, `count` of them.
    private let strings: UnsafeMutablePointer<String>

    /// A table of `names` (repeats are kept once, the first).
    package init(_ names: some Sequence<String>) {
        var unique: [String] = []
        var storage: [UInt8] = []
        var ranges: [Range<Int>] = []
        var capacity = 8
        let given = Array(names)
        while capacity < given.count * 2 { capacity *= 2 }
        var slots = [Int32](repeating: 0, count: capacity)
        for name in given {
            let bytes = Array(name.utf8)
            var slot = Self.hash(bytes) & (capacity - 1)
            var repeated = false
            while slots[slot] != 0 {
                if storage[ranges[Int(slots[slot]) - 1]].elementsEqual(bytes) {
                    repeated = true
                    break
                }
                slot = (slot + 1) & (capacity - 1)
            }
            guard !repeated else { continue }
            ranges.append(storage.count..<storage.count + bytes.count)
            storage.append(contentsOf: bytes)
            unique.append(name)
            slots[slot] = Int32(unique.count)
        }
        self.count = unique.count
        self.mask = capacity - 1
        self.slots = .allocate(capacity: capacity)
        self.slots.initialize(from: slots, count: capacity)
        self.starts = .allocate(capacity: max(1, ranges.count))
        self.starts.initialize(from: ranges.map(\.lowerBound), count: ranges.count)
        self.counts = .allocate(capacity: max(1, ranges.count))
        self.counts.initialize(from: ranges.map(\.count), count: ranges.count)
        self.bytes = .allocate(capacity: max(1, storage.count))
        self.bytes.initialize(from: storage, count: storage.count)
        self.strings = .allocate(capacity: max(1, unique.count))
        self.strings.initialize(from: unique, count: unique.count)
    }

    deinit {
        slots.deallocate()
        starts.deallocate()
        counts.deallocate()
        bytes.deallocate()
        strings.deinitialize(count: count)
        strings.deallocate()
    }

    /// The index of the name whose bytes are exactly `name`'s, or `nil`.
    package func index(of name: UnsafeRawBufferPointer) -> Int? {
        var slot = Self.hash(name) & mask
        while true {
            let found = Int(slots[slot])
            guard found != 0 else { return nil }
            let index = found - 1
            if JSONParser.same(UnsafeRawBufferPointer(start: bytes + starts[index], count: counts[index]), name) { return index }
            slot = (slot + 1) & mask
        }
    }

    /// The index of the name whose UTF-8 bytes are exactly `name`'s, or `nil`.
    package func index(of name: String) -> Int? {
        var name = name
        return name.withUTF8 { self.index(of: UnsafeRawBufferPointer($0)) }
    }

    /// `names[index]`, read without making the array.
    package func name(at index: Int) -> String {
        precondition(index >= 0 && index < count, "no operation name at \(index)")
        return strings[index]
    }

    /// FNV-1a, 64-bit, folded to an Int.
    private static func hash(_ bytes: some Sequence<UInt8>) -> Int {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes {
            hash = (hash ^ UInt64(byte)) &* 0x0000_0100_0000_01b3
        }
        return Int(truncatingIfNeeded: hash ^ (hash >> 32))
    }
}
