extension StoreTables {
    /// What one chunk of a snapshot wrote.
    struct ChunkCount {
        var principals = 0
        var sessions = 0
        var users = 0
        var outbox = 0
    }

    /// Appends an entry for every outbox entry, numbered from `index` (SNAPSHOT.md: they come first).
    func appendOutbox(index: inout UInt64, to bytes: inout [UInt8]) -> ChunkCount {
        var count = ChunkCount()
        for entry in outbox.values.sorted(by: { $0.id < $1.id }) {
            bytes.appendFramed(sequence: index) { SnapshotEntry.appendOutbox(entry, to: &$0) }
            index += 1
            count.outbox += 1
        }
        return count
    }

    /// Appends entries (SNAPSHOT.md, "Entries") for the principals in slots from `cursor` on, each
    /// followed by their sessions, until about `limit` entries are written; numbered from `index`.
    /// Returns where to go on (0 after the last slot) and what it wrote.
    func appendEntries(from cursor: Int, limit: Int, index: inout UInt64, to bytes: inout [UInt8]) -> (next: Int, ChunkCount) {
        var count = ChunkCount()
        var slot = cursor
        while slot < principalSlots.count && count.principals + count.sessions < limit {
            let principal = principalSlots[UInt32(slot)]
            slot += 1
            guard principal.isLive else { continue }
            let userJSON = principal.user.map { User(principal.key, $0).recordJSON }
            bytes.appendFramed(sequence: index) { SnapshotEntry.appendPrincipal(principal.key, userJSON: userJSON, to: &$0) }
            index += 1
            count.principals += 1
            if userJSON != nil { count.users += 1 }
            // A principal's sessions go in the same chunk, so that none can move between chunks.
            var next = principal.firstSession
            while next != Self.none {
                let entry = sessionSlots[next]
                bytes.appendFramed(sequence: index) {
                    SnapshotEntry.appendSession(
                        SnapshotEntry.SessionState(
                            id: entry.id, check: entry.check, createdAt: entry.createdAt, expiresAt: entry.expiresAt,
                            idleSeconds: entry.idleSeconds, lastSeenAt: entry.lastSeenAt, data: entry.data),
                        to: &$0)
                }
                index += 1
                count.sessions += 1
                next = entry.next
            }
        }
        return (slot >= principalSlots.count ? 0 : slot, count)
    }

    /// Makes room for a snapshot's sessions and principals before loading it.
    mutating func reserve(sessions: Int, principals: Int) {
        sessionIndex.reserve(sessions)
        sessionSlots.reserve(sessions)
        principalIndex.reserve(principals)
        principalSlots.reserve(principals)
    }

    /// Loads a principal entry; returns the principal's slot, for the session entries after it. A
    /// principal that is there already (an entry can repeat when chunks saw it twice) takes this
    /// entry's user record.
    mutating func loadPrincipal(_ principal: Principal, _ user: User?) -> UInt32 {
        let slot = principalSlot(for: principal)
        setUser(slot, user.map(UserState.init))
        return slot
    }

    /// Loads a session entry of the principal in slot `principal` (from `loadPrincipal`); returns that
    /// principal's slot afterwards. A session that is there already is replaced.
    mutating func loadSession(_ session: SnapshotEntry.SessionState, principal: UInt32) -> UInt32 {
        var principal = principal
        let key = principalSlots[principal].key
        if slot(of: session.id) != nil {
            // Removing it may free the principal's slot when it was their only session.
            var none: [Undo]? = nil
            remove(session.id, undo: &none)
            principal = principalSlot(for: key)
        }
        let new = StoreRecord.NewSession(
            id: session.id, check: session.check, principal: key, createdAt: session.createdAt,
            expiresAt: session.expiresAt, idleSeconds: session.idleSeconds, data: session.data)
        insert(new, principal: principal, lastSeenAt: session.lastSeenAt, loggedSeenAt: session.lastSeenAt)
        return principal
    }
}
