extension StoreTables {
    /// Appends an entry (SNAPSHOT.md, "Entries") for each live session in slots `cursor` up to
    /// `cursor + limit`, numbered from `index`; returns where to go on (0 after the last slot).
    func appendSessionEntries(from cursor: Int, limit: Int, index: inout UInt64, to bytes: inout [UInt8]) -> Int {
        let end = min(sessionSlots.count, cursor + limit)
        for slot in cursor..<max(cursor, end) {
            let entry = sessionSlots[UInt32(slot)]
            guard entry.principal != Self.none else { continue }
            let principal = principalSlots[entry.principal].key
            bytes.appendFramed(sequence: index) {
                SnapshotEntry.appendSession(
                    id: entry.id, check: entry.check, principal: principal, createdAt: entry.createdAt,
                    expiresAt: entry.expiresAt, idleSeconds: entry.idleSeconds, lastSeenAt: entry.lastSeenAt,
                    data: entry.data, to: &$0)
            }
            index += 1
        }
        return end >= sessionSlots.count ? 0 : end
    }

    /// Appends an entry for each user record in principal slots `cursor` up to `cursor + limit`,
    /// numbered from `index`; returns where to go on (0 after the last slot).
    func appendUserEntries(from cursor: Int, limit: Int, index: inout UInt64, to bytes: inout [UInt8]) -> Int {
        let end = min(principalSlots.count, cursor + limit)
        for slot in cursor..<max(cursor, end) {
            let entry = principalSlots[UInt32(slot)]
            guard let user = entry.user else { continue }
            let json = User(entry.key, user).recordJSON
            bytes.appendFramed(sequence: index) { SnapshotEntry.appendUser(entry.key, json: json, to: &$0) }
            index += 1
        }
        return end >= principalSlots.count ? 0 : end
    }

    /// Makes room for a snapshot's sessions and users before loading it.
    mutating func reserve(sessions: Int, principals: Int) {
        sessionIndex.reserveCapacity(sessions)
        principalIndex.reserveCapacity(principals)
    }

    /// Loads one snapshot entry. A session that is there already is replaced (an entry can repeat when
    /// a chunk saw it twice); a session entry never changes its user's record.
    mutating func load(_ entry: SnapshotEntry) {
        var none: [Undo]? = nil
        switch entry {
        case .user(let principal, let json):
            // Decoding checked that the JSON is a user record.
            guard let user = User(principal: principal, recordJSON: json) else { return }
            setUser(principalSlot(for: principal), UserState(user))
        case .session(let new, let lastSeenAt):
            if sessionIndex[new.id] != nil { remove(new.id, undo: &none) }
            insert(new, principal: principalSlot(for: new.principal), lastSeenAt: lastSeenAt, loggedSeenAt: lastSeenAt)
        }
    }
}
