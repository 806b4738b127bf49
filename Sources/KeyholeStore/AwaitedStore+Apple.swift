import KeyholeProtocol

/// The local store behind `AppleStoring`: one host, so the outbox needs no lease (an entry is
/// claimed while it is there; `AppleRevocations` keeps its own back-off in memory).
extension AwaitedStore: AppleStoring {
    public func modifyUser(
        _ principal: Principal, now: Int64, revokeSessions: Bool, _ update: @escaping @Sendable (inout User) -> Bool
    ) async throws(StoreError) -> (user: User, applied: Bool, sessions: Int)? {
        try await Store.durably { done throws(StoreError) in
            try store.modifyUser(principal, now: now, revokeSessions: revokeSessions, completion: done, update)
        }
    }

    public func signIn(
        _ principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?, _ update: @escaping @Sendable (inout User) -> Void
    ) async throws(StoreError) -> (user: User, created: Bool, token: String, session: Session) {
        try await Store.durably { done throws(StoreError) in
            try store.signIn(principal, now: now, ttl: ttl, idle: idle, data: data, completion: done, update)
        }
    }

    public func moveUser(
        _ from: Principal, to: Principal, now: Int64, adjust: @escaping @Sendable (inout User) -> Void
    ) async throws(StoreError) -> (user: User?, sessions: Int)? {
        try await Store.durably { done throws(StoreError) in try store.moveUser(from, to: to, now: now, completion: done, adjust: adjust) }
    }

    public func deleteUser(
        _ principal: Principal, now: Int64, when condition: @escaping @Sendable (User?) -> Bool,
        outbox work: @escaping @Sendable (User) -> Store.OutboxWork?
    ) async throws(StoreError) -> (deleted: Bool, sessions: Int, outbox: OutboxEntry?) {
        try await Store.durably { done throws(StoreError) in
            try store.deleteUser(principal, now: now, completion: done, when: condition, outbox: work)
        }
    }

    public func users(of issuer: String, from cursor: UserCursor?, limit: Int) async throws(StoreError) -> (users: [User], next: UserCursor?) {
        var slot = 0
        if case .slot(let next)? = cursor { slot = next }
        let (users, next) = store.users(from: slot, limit: limit) { ExactString.equal($0.principal.issuer, issuer) }
        return (users, next == 0 ? nil : .slot(next))
    }

    public func outbox(kind: String) async throws(StoreError) -> [OutboxEntry] {
        store.outbox(kind: kind)
    }

    public func outboxCountNow(kind: String) -> Int? {
        store.outbox(kind: kind).count
    }

    public func claimOutbox(_ id: UInt64, lease: Int64, now: Int64) async throws(StoreError) -> OutboxClaim {
        store.outboxEntry(id) == nil ? .gone : .claimed
    }

    public func completeOutbox(_ id: UInt64) async throws(StoreError) -> Bool {
        try await Store.durably { done throws(StoreError) in try store.completeOutbox(id, completion: done) }
    }

    public func releaseOutbox(_ id: UInt64, retryAt: Int64, now: Int64) async throws(StoreError) {}
}
