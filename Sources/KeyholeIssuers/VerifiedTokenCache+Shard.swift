import KeyholeJOSE

extension VerifiedTokenCache {
    /// One shard: a dictionary from a token's index key (`TokenKey`) into a doubly linked list kept
    /// in an array, most recently used first. A node holds its token's bytes, and a lookup is a hit
    /// only when they equal the token asked for: the index key only finds the candidate. Slots are
    /// reused, so a full cache allocates nothing per insert but the token's bytes.
    struct Shard {
        struct Node {
            var key: UInt64
            var token: [UInt8]
            var entry: Entry?
            var previous: Int32
            var next: Int32
        }

        let capacity: Int
        var index: [UInt64: Int32] = [:]
        var nodes: [Node] = []
        var free: [Int32] = []
        /// Most and least recently used; -1 when empty.
        var head: Int32 = -1
        var tail: Int32 = -1
        /// Counted under the shard's lock, so they cost no atomic operation.
        var hits = 0
        var misses = 0
        var evictions = 0

        init(capacity: Int) { self.capacity = capacity }

        mutating func entry(for token: TokenKey, now: Double) -> Entry? {
            // Compared in constant time: how long a wrong token took must not tell how much of a
            // cached one it matched.
            guard let slot = index[token.key], let entry = nodes[Int(slot)].entry,
                nodes[Int(slot)].token.withUnsafeBytes({ ConstantTime.equal($0, token.bytes) })
            else {
                misses += 1
                return nil
            }
            // Written so that a NaN time evicts.
            guard now < entry.evictAt else {
                release(slot)
                misses += 1
                return nil
            }
            moveToFront(slot)
            hits += 1
            return entry
        }

        mutating func insert(_ entry: Entry, for token: TokenKey) {
            if let slot = index[token.key] {
                // The same token again, or another with the same index key: either way the newer
                // one is kept, and the other one is a miss from now on.
                if !nodes[Int(slot)].token.withUnsafeBytes({ ConstantTime.equal($0, token.bytes) }) {
                    nodes[Int(slot)].token.withUnsafeMutableBytes { LocalFile.wipe($0) }
                    nodes[Int(slot)].token = Array(token.bytes)
                }
                nodes[Int(slot)].entry = entry
                moveToFront(slot)
                return
            }
            if index.count >= capacity, tail >= 0 {
                release(tail)
                evictions += 1
            }
            let node = Node(key: token.key, token: Array(token.bytes), entry: entry, previous: -1, next: head)
            let slot: Int32
            if let reused = free.popLast() {
                slot = reused
                nodes[Int(slot)] = node
            } else {
                slot = Int32(nodes.count)
                nodes.append(node)
            }
            if head >= 0 { nodes[Int(head)].previous = slot }
            head = slot
            if tail < 0 { tail = slot }
            index[token.key] = slot
        }

        mutating func removeAll(where shouldRemove: (Entry) -> Bool) {
            var slot = head
            while slot >= 0 {
                let next = nodes[Int(slot)].next
                if let entry = nodes[Int(slot)].entry, shouldRemove(entry) { release(slot) }
                slot = next
            }
        }

        private mutating func unlink(_ slot: Int32) {
            let node = nodes[Int(slot)]
            if node.previous >= 0 { nodes[Int(node.previous)].next = node.next } else { head = node.next }
            if node.next >= 0 { nodes[Int(node.next)].previous = node.previous } else { tail = node.previous }
        }

        private mutating func moveToFront(_ slot: Int32) {
            guard head != slot else { return }
            unlink(slot)
            nodes[Int(slot)].previous = -1
            nodes[Int(slot)].next = head
            if head >= 0 { nodes[Int(head)].previous = slot }
            head = slot
            if tail < 0 { tail = slot }
        }

        /// Unlinks the slot, forgets its token (its bytes zeroed first: a bearer token is not left in
        /// freed memory) and entry (the claims and key are freed now), and keeps the slot for reuse.
        private mutating func release(_ slot: Int32) {
            unlink(slot)
            index.removeValue(forKey: nodes[Int(slot)].key)
            nodes[Int(slot)].token.withUnsafeMutableBytes { LocalFile.wipe($0) }
            nodes[Int(slot)].token = []
            nodes[Int(slot)].entry = nil
            nodes[Int(slot)].previous = -1
            nodes[Int(slot)].next = -1
            free.append(slot)
        }
    }
}
