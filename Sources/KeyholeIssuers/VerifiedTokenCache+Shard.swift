import KeyholeJOSE

extension VerifiedTokenCache {
    /// One shard: a dictionary into a doubly linked list kept in an array, most recently used first.
    /// Slots are reused, so a full cache allocates nothing per insert.
    struct Shard {
        struct Node {
            var digest: SHA256.Digest
            var entry: Entry?
            var previous: Int32
            var next: Int32
        }

        let capacity: Int
        var index: [SHA256.Digest: Int32] = [:]
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

        mutating func entry(for digest: SHA256.Digest, now: Double) -> Entry? {
            guard let slot = index[digest], let entry = nodes[Int(slot)].entry else {
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

        mutating func insert(_ entry: Entry, for digest: SHA256.Digest) {
            if let slot = index[digest] {
                nodes[Int(slot)].entry = entry
                moveToFront(slot)
                return
            }
            if index.count >= capacity, tail >= 0 {
                release(tail)
                evictions += 1
            }
            let node = Node(digest: digest, entry: entry, previous: -1, next: head)
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
            index[digest] = slot
        }

        mutating func remove(_ digest: SHA256.Digest) {
            if let slot = index[digest] { release(slot) }
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

        /// Unlinks the slot, forgets its digest and entry (the claims and key are freed now), and keeps
        /// the slot for reuse.
        private mutating func release(_ slot: Int32) {
            unlink(slot)
            index.removeValue(forKey: nodes[Int(slot)].digest)
            nodes[Int(slot)].entry = nil
            nodes[Int(slot)].previous = -1
            nodes[Int(slot)].next = -1
            free.append(slot)
        }
    }
}
