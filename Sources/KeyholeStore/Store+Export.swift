extension Store {
    /// A live session as another store must hold it to keep its token working: the session and its
    /// check (the token itself is never stored, here or there).
    package struct ExportedSession: Sendable {
        /// The session, its last use included.
        package var session: Session
        /// The second half of its token's SHA-256.
        package var check: SessionCheck
    }

    /// The sessions live at `now` in session slots from `cursor` on (`limit` slots at most, under one
    /// hold of the lock), how many expired ones were passed over, and where to go on (0 after the
    /// last slot): `keyholed --migrate-to-postgres` copies every session a slice at a time. Read
    /// only: nothing is touched, and expired sessions are left where they are (start-up or the
    /// sweeper removes them).
    package func exportSessions(from cursor: Int, limit: Int, now: Int64) -> (sessions: [ExportedSession], expired: Int, next: Int) {
        state.withLock { state in
            let tables = state.tables
            var found: [ExportedSession] = []
            var expired = 0
            let end = min(tables.sessionSlots.count, cursor + limit)
            var slot = cursor
            while slot < end {
                let index = UInt32(slot)
                // A freed slot keeps its old contents with no principal: not a session.
                if tables.sessionSlots[index].principal != StoreTables.none {
                    if tables.isExpired(index, now: now) {
                        expired += 1
                    } else {
                        found.append(ExportedSession(session: tables.session(at: index), check: tables.sessionSlots[index].check))
                    }
                }
                slot += 1
            }
            return (found, expired, slot >= tables.sessionSlots.count ? 0 : slot)
        }
    }
}
