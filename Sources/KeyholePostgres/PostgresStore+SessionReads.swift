import KeyholeStore
import NIOCore
import PostgresNIO

/// A session the cache could not answer for, waiting for its batch (`SessionReads`).
struct SessionRead: Sendable {
    let id: SessionID
    let check: SessionCheck
    let now: Int64
    /// A miss's ticket, to fill the cache with the row; `nil`: the answer is not cached (the view is
    /// not fresh, or a cached session that looked idle is read again).
    let ticket: SessionCacheState.FillTicket?
}

typealias PendingRead = PendingCall<SessionRead, (session: Session, user: User?)?>

extension PostgresStore {
    /// The live session `token` names, and its user's record, marked as used now (written when due,
    /// `writeTouches`); `nil` for an unknown, revoked or expired session
    /// alike, and for a token whose check does not match (compared in constant time). From the
    /// cache while this host's view is fresh, else from the database (and then cached).
    public func session(token: String, now: Int64) async throws(PostgresStoreError) -> (session: Session, user: User?)? {
        try await withCheckedContinuation { waiting in session(token: token, now: now) { waiting.resume(returning: $0) } }.get()
    }

    /// `session(token:now:)` with the answer handed to `completion` (once, from any thread), for a
    /// caller that need not wait in a task of its own: a cache miss goes to the database with the
    /// next batch of them (`StatementBatcher`), bounded by the timeout from now.
    public func session(
        token: String, now: Int64, completion: @escaping @Sendable (Result<(session: Session, user: User?)?, PostgresStoreError>) -> Void
    ) {
        guard let (id, check) = SessionToken.digest(token) else { return completion(.success(nil)) }
        switch cached(id, check: check, now: now) {
        case .answered(let found): completion(.success(found))
        case .read(let read): submit(read, completion: completion)
        }
    }

    /// session.get in one pass: `token` hashed once, and the cache's lock taken once; its answer
    /// written into `buffer` from the cache (in place for a session used this second already, as
    /// `writeSessionWithoutWaiting` writes it), or `.notFound`; else `.later`, and the completion
    /// `later` makes has the database's answer (`session(token:now:completion:)`).
    public func getSession(
        token: UnsafeRawBufferPointer, now: Int64, into buffer: inout ByteBuffer,
        later: () -> @Sendable (Result<(session: Session, user: User?)?, PostgresStoreError>) -> Void
    ) -> SessionGet {
        guard let (id, check) = SessionToken.digest(bytes: token) else { return .notFound }
        let clock = monotonic()
        let step = cache.withLock { state -> CacheStep in
            switch state.withRecentHit(id, now: clock, { Self.writeInPlace(&$0, check: check, now: now, into: &buffer) }) {
            case .written?: .written
            case .notFound?: .notFound
            case .mustWait?, nil: .looked(state.lookup(id, now: clock))
            }
        }
        let lookup: SessionCacheState.Lookup
        switch step {
        case .written: return .written
        case .notFound: return .notFound
        case .looked(let looked): lookup = looked
        }
        switch cached(id, check: check, now: now, from: lookup) {
        case .answered(let found?):
            found.session.writeGetJSON(user: found.user, to: &buffer)
            return .written
        case .answered(nil): return .notFound
        case .read(let read):
            submit(read, completion: later())
            return .later
        }
    }

    /// What `getSession` did under the cache's lock.
    private enum CacheStep {
        case written, notFound
        /// Not in place: what the cache has for the long way.
        case looked(SessionCacheState.Lookup)
    }

    /// `read` with the next batch of them (`StatementBatcher`), bounded by the timeout from now.
    private func submit(_ read: SessionRead, completion: @escaping @Sendable (Result<(session: Session, user: User?)?, PostgresStoreError>) -> Void) {
        let call = PendingRead(read, within: configuration.timeout, doing: "reading a session", completion: completion)
        reads.submit(call, to: SessionReads(store: self))
    }

    /// The session `token` names from this host's cache, without waiting: found (and marked as used)
    /// or not found on a hit; `.mustWait` on a miss, with the cache not fresh, or for a session that
    /// looks idle before its expiry (another host's use may not be written yet).
    public func sessionWithoutWaiting(token: String, now: Int64) -> ImmediateSession {
        guard let (id, check) = SessionToken.digest(token) else { return .notFound }
        switch cached(id, check: check, now: now) {
        case .answered(let found?): return .found(found.session, found.user)
        case .answered(nil): return .notFound
        case .read: return .mustWait
        }
    }

    /// session.get's answer for a token whose session is cached and already marked as used at `now`
    /// (a busy session's every use after its first in a second), written into `buffer` from the
    /// entry, under the cache's lock, without copying it, when it fits in the room `buffer` has;
    /// `.notFound` when the token's check does not match (compared in constant time). Anything else
    /// is `.mustWait`, for the long way (`sessionWithoutWaiting`), which would answer such a session
    /// exactly so: with nothing to record (its use is this second's already) and nothing to read.
    public func writeSessionWithoutWaiting(token: UnsafeRawBufferPointer, now: Int64, into buffer: inout ByteBuffer) -> ImmediateWrite {
        guard let (id, check) = SessionToken.digest(bytes: token) else { return .notFound }
        return writeCached(id, check: check, now: now, into: &buffer)
    }

    private func writeCached(_ id: SessionID, check: SessionCheck, now: Int64, into buffer: inout ByteBuffer) -> ImmediateWrite {
        let clock = monotonic()
        return cache.withLock { $0.withRecentHit(id, now: clock) { Self.writeInPlace(&$0, check: check, now: now, into: &buffer) } } ?? .mustWait
    }

    /// `entry`'s answer written into `buffer` under the cache's lock (`writeSessionWithoutWaiting`).
    private static func writeInPlace(_ entry: inout SessionCacheState.Entry, check: SessionCheck, now: Int64, into buffer: inout ByteBuffer) -> ImmediateWrite {
        guard entry.session.lastSeenAt >= now, now < entry.session.endsAt else { return .mustWait }
        guard entry.check.matches(check) else { return .notFound }
        // Only into the room the caller made: a big session goes the long way rather than grow the
        // buffer under the lock.
        return entry.session.writeGetJSON(user: entry.user, within: &buffer) ? .written : .mustWait
    }

    /// What this host's cache can say of a session at `now`.
    private enum Cached {
        /// The answer (a hit, or no session).
        case answered((session: Session, user: User?)?)
        /// The database must be asked.
        case read(SessionRead)
    }

    private func cached(_ id: SessionID, check: SessionCheck, now: Int64) -> Cached {
        cached(id, check: check, now: now, from: cache.withLock { $0.lookup(id, now: monotonic()) })
    }

    /// What `lookup`, the cache's answer for `id`, says of the token at `now`.
    private func cached(_ id: SessionID, check: SessionCheck, now: Int64, from lookup: SessionCacheState.Lookup) -> Cached {
        switch lookup {
        case .hit(let cached, let stored, let user):
            let session = latestUse(cached, now: now)
            // Cached, but idle by what this host knows, yet before its expiry: another host may have
            // used it since (its use is written before the row's deadline). Ask the database rather
            // than refuse.
            if now >= session.endsAt, now < session.expiresAt { return .read(SessionRead(id: id, check: check, now: now, ticket: nil)) }
            return .answered(used(session, stored: stored, user: user, check: check, now: now))
        case .miss(let ticket): return .read(SessionRead(id: id, check: check, now: now, ticket: ticket))
        case .bypass: return .read(SessionRead(id: id, check: check, now: now, ticket: nil))
        }
    }

    /// `session` (its latest use known here) and its user for a token whose check is `check`:
    /// marked as used at `now` when it is live and the checks match (in constant time), else nil.
    private func used(_ session: Session, stored: SessionCheck, user: User?, check: SessionCheck, now: Int64) -> (session: Session, user: User?)? {
        guard stored.matches(check), now < session.endsAt else { return nil }
        return (markUsed(session, now: now), user)
    }

    /// A read's answer from its row (`nil`: none): the cache filled on a miss, the token's check
    /// compared in constant time, the session marked as used.
    func answer(_ read: SessionRead, from row: Result<(Session, SessionCheck, User?), PostgresStoreError>?) -> Result<
        (session: Session, user: User?)?, PostgresStoreError
    > {
        guard let row else { return .success(nil) }
        return row.map { found in
            let (session, stored, user) = found
            if let ticket = read.ticket {
                let userKey = PostgresRows.userKey(session.principal), clock = monotonic()
                cache.withLock { _ = $0.fill(ticket, session: session, check: stored, user: user, userKey: userKey, now: clock) }
            }
            return used(latestUse(session, now: read.now), stored: stored, user: user, check: read.check, now: read.now)
        }
    }

    /// The sessions and users in a batch's rows, by session id; a row keyholed cannot read is its
    /// session's failure alone.
    static func sessions(from rows: [PostgresRow]) throws(PostgresStoreError) -> [SessionID: Result<(Session, SessionCheck, User?), PostgresStoreError>] {
        var found: [SessionID: Result<(Session, SessionCheck, User?), PostgresStoreError>] = [:]
        found.reserveCapacity(rows.count)
        for row in rows {
            typealias Cells = PostgresStatements.Cells
            var cells = Cells(row)
            guard let id = SessionID(bytes: try Cells.required(cells.bytes()).readableBytesView) else { continue }  // asked for by a 16-byte id: not one of them
            let sessionRow: PostgresRows.SessionRow = (
                try Cells.required(cells.bytes()), try Cells.required(cells.bytes()), try Cells.required(cells.bytes()),
                try Cells.required(cells.int64()), try Cells.required(cells.int64()), try Cells.required(cells.int64()),
                try Cells.required(cells.int32()), try cells.bytes()
            )
            let userCreated = try cells.int64(), updated = try cells.int64(), login = try cells.int64(), fields = try cells.bytes()
            found[id] = PostgresRows.session(id: id, sessionRow).flatMap { read in
                let (session, check) = read
                guard let userCreated, let updated, let fields else { return .success((session, check, nil)) }
                return PostgresRows.user(session.principal, (userCreated, updated, login, fields)).map { (session, check, $0) }
            }
        }
        return found
    }

    /// `session` used at `now`: recorded here, written when due (`writeTouches`), and so in the
    /// cache. Nothing to record for a session whose last use is
    /// `now` already (its row's, or one recorded here): most uses of a busy session, which then
    /// take no lock here and write nothing there.
    func markUsed(_ session: Session, now: Int64) -> Session {
        guard now > session.lastSeenAt else { return session }
        var session = session
        // With no use pending, the session's last use is its row's as this host knows it.
        let use = PendingUse(used: now, rowSeen: session.lastSeenAt, idle: Int64(session.idleSeconds))
        pendingTouches.withLock { $0.record(use, for: session.id) }
        session.lastSeenAt = max(session.lastSeenAt, now)
        cache.withLock { $0.update(session) }
        return session
    }

    /// `session` with its last use this host recorded and has not written yet, if later; as it is
    /// when it was last used `now` or later already (a later unwritten use would move its idle
    /// deadline further past `now`, and a session is judged at `now`).
    func latestUse(_ session: Session, now: Int64) -> Session {
        guard session.lastSeenAt < now else { return session }
        var session = session
        if let pending = pendingTouches.withLock({ $0[session.id] }) { session.lastSeenAt = max(session.lastSeenAt, pending.used) }
        return session
    }
}

/// Runs a batch of reads: one statement for all of them, then each call answered from its row.
struct SessionReads: BatchRunner {
    static let sql = PostgresStatements.readSessions
    let store: PostgresStore

    func run(_ batch: [PendingRead], through statement: PreparedQuery, on eventLoop: any EventLoop) -> EventLoopFuture<BatchAnswers> {
        let store = self.store
        let ids = PostgresStatements.bind(batch.map { PostgresRows.bytes($0.request.id.bytes) })
        return statement.execute([ids]).map { rows in
            // Read after the next batch is sent (`StatementBatcher`); a batch's rows the store
            // cannot read fail its calls, as the whole batch's failure would.
            return {
                do throws(PostgresStoreError) {
                    let found = try PostgresStore.sessions(from: rows)
                    for call in batch { call.answer(store.answer(call.request, from: found[call.request.id])) }
                } catch {
                    for call in batch { call.fail(error) }
                }
            }
        }
    }
}
