/// A server's operation names, looked up by their bytes: `Request.parse` finds a request's `op` in
/// the frame without making a `String` of it or hashing one, and a name matches only a name of the
/// same bytes (a `String` dictionary also matches canonically equivalent text: a Kelvin sign for "K").
///
/// An open-addressing table of at least twice as many slots as names, FNV-1a over the name's bytes
/// for the slot, and the bytes compared for the match: one pass over the `op`'s few bytes to hash,
/// one to compare. A class, so that handing the table to each parse costs one reference, not four.
/// Package-wide, not public: it is the server's, and KeyholeProtocol is also the clients' library.
package final class OperationNames: Sendable {
    /// The names, in the order given; a lookup answers an index into them.
    package let names: [String]
    /// Every name's bytes, one after another; `ranges[i]` is where name `i`'s lie.
    private let storage: [UInt8]
    private let ranges: [Range<Int>]
    /// Index + 1 of the name in each slot; 0 for an empty slot.
    private let slots: [Int32]

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
        self.names = unique
        self.storage = storage
        self.ranges = ranges
        self.slots = slots
    }

    /// The index of the name whose bytes are exactly `name`'s, or `nil`.
    package func index(of name: UnsafeRawBufferPointer) -> Int? {
        let mask = slots.count - 1
        var slot = Self.hash(name) & mask
        return storage.withUnsafeBytes { storage in
            while true {
                let found = Int(slots[slot])
                guard found != 0 else { return nil }
                if JSONParser.same(UnsafeRawBufferPointer(rebasing: storage[ranges[found - 1]]), name) { return found - 1 }
                slot = (slot + 1) & mask
            }
        }
    }

    /// The index of the name whose UTF-8 bytes are exactly `name`'s, or `nil`.
    package func index(of name: String) -> Int? {
        var name = name
        return name.withUTF8 { self.index(of: UnsafeRawBufferPointer($0)) }
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
