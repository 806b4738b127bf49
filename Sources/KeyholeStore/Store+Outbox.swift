import KeyholeProtocol

extension Store {
    /// What to add to the outbox along with a change: its kind and payload.
    public typealias OutboxWork = (kind: String, payload: [String: JSONValue])

    /// The outbox entries of `kind` (all when `nil`), oldest first.
    public func outbox(kind: String? = nil) -> [OutboxEntry] {
        let entries = state.withLock { state in
            kind.map { kind in state.tables.outbox.values.filter { $0.kind == kind } } ?? Array(state.tables.outbox.values)
        }
        return entries.sorted { ($0.createdAt, $0.id) < ($1.createdAt, $1.id) }
    }

    /// Outbox entry `id`, while it is there (not yet done).
    public func outboxEntry(_ id: UInt64) -> OutboxEntry? {
        state.withLock { $0.tables.outbox[id] }
    }

    /// Adds an entry to the outbox; it stays there, across restarts, until `completeOutbox`.
    public func addOutbox(_ work: OutboxWork, now: Int64, completion: @escaping Completion) throws(StoreError) -> OutboxEntry {
        try change(completion) { tables, undo throws(StoreError) -> (OutboxEntry, [StoreRecord]) in
            let entry = tables.newOutboxEntry(work, now: now)
            tables.setOutbox(entry.id, entry, undo: &undo)
            return (entry, [.outboxPut(entry)])
        }
    }

    /// Marks outbox entry `id` done: it is removed. Returns whether it was there.
    public func completeOutbox(_ id: UInt64, completion: @escaping Completion) throws(StoreError) -> Bool {
        try change(completion) { tables, undo throws(StoreError) -> (Bool, [StoreRecord]) in
            guard tables.outbox[id] != nil else { return (false, []) }
            tables.setOutbox(id, nil, undo: &undo)
            return (true, [.outboxDone(id)])
        }
    }

    /// Deletes `principal`'s record and every session of theirs, as `deleteUser(_:now:completion:)`
    /// does, and in the same change adds the outbox entry `work` returns for the record as it was
    /// (called under the store's lock, so that no update can slip in between). When `condition`
    /// refuses the record as it is (`nil` when there is none), nothing is deleted.
    ///
    /// The entry's record is logged before the deletion's: a crash that keeps only one of them keeps
    /// the work owed, never a deletion whose work is lost.
    public func deleteUser(
        _ principal: Principal, now: Int64, completion: @escaping Completion,
        when condition: (User?) -> Bool = { _ in true }, outbox work: (User) -> OutboxWork?
    ) throws(StoreError) -> (deleted: Bool, sessions: Int, outbox: OutboxEntry?) {
        try change(completion) { tables, undo throws(StoreError) -> ((Bool, Int, OutboxEntry?), [StoreRecord]) in
            let user = tables.user(principal)
            guard condition(user) else { return ((false, 0, nil), []) }
            let live = tables.liveSessionCount(of: principal, now: now)
            let removed = tables.removeAll(of: principal, undo: &undo)
            guard user != nil || removed > 0 else { return ((false, 0, nil), []) }
            tables.setUser(principal, nil, undo: &undo)
            guard let user, let work = work(user) else { return ((true, live, nil), [.userDelete(principal)]) }
            let entry = tables.newOutboxEntry(work, now: now)
            tables.setOutbox(entry.id, entry, undo: &undo)
            return ((true, live, entry), [.outboxPut(entry), .userDelete(principal)])
        }
    }
}

extension StoreTables {
    /// An entry for `work` under an id no entry has.
    func newOutboxEntry(_ work: Store.OutboxWork, now: Int64) -> OutboxEntry {
        var id = UInt64.random(in: 1...UInt64.max)
        while outbox[id] != nil { id = UInt64.random(in: 1...UInt64.max) }
        return OutboxEntry(id: id, kind: work.kind, createdAt: now, payload: work.payload)
    }
}
