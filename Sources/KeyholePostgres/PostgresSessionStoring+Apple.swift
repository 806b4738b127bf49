import KeyholeStore

/// `PostgresStore` behind `AppleStoring`: Sign in with Apple on several hosts sharing one database.
extension PostgresSessionStoring: AppleStoring {
    public func modifyUser(
        _ principal: Principal, now: Int64, revokeSessions: Bool, _ update: @escaping @Sendable (inout User) -> Bool
    ) async throws(StoreError) -> (user: User, applied: Bool, sessions: Int)? {
        try await mapped { () async throws(PostgresStoreError) in
            try await store.modifyUser(principal, now: now, revokeSessions: revokeSessions, update)
        }
    }

    public func signIn(
        _ principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?, _ update: @escaping @Sendable (inout User) -> Void
    ) async throws(StoreError) -> (user: User, created: Bool, token: String, session: Session) {
        try await mapped { () async throws(PostgresStoreError) in
            try await store.signIn(principal, now: now, ttl: ttl, idle: idle, data: data, update)
        }
    }

    public func moveUser(
        _ from: Principal, to: Principal, now: Int64, adjust: @escaping @Sendable (inout User) -> Void
    ) async throws(StoreError) -> (user: User?, sessions: Int)? {
        try await mapped { () async throws(PostgresStoreError) in try await store.moveUser(from, to: to, now: now, adjust: adjust) }
    }

    public func deleteUser(
        _ principal: Principal, now: Int64, when condition: @escaping @Sendable (User?) -> Bool,
        outbox work: @escaping @Sendable (User) -> Store.OutboxWork?
    ) async throws(StoreError) -> (deleted: Bool, sessions: Int, outbox: OutboxEntry?) {
        try await mapped { () async throws(PostgresStoreError) in try await store.deleteUser(principal, now: now, when: condition, outbox: work) }
    }

    public func users(of issuer: String, from cursor: UserCursor?, limit: Int) async throws(StoreError) -> (users: [User], next: UserCursor?) {
        try await mapped { () async throws(PostgresStoreError) in try await store.users(of: issuer, from: cursor, limit: limit) }
    }

    public func outbox(kind: String) async throws(StoreError) -> [OutboxEntry] {
        try await mapped { () async throws(PostgresStoreError) in try await store.outbox(kind: kind) }
    }

    /// Not without asking the database: `AppleRevocations` counts as of its last pass.
    public func outboxCountNow(kind: String) -> Int? { nil }

    public func claimOutbox(_ id: UInt64, lease: Int64, now: Int64) async throws(StoreError) -> OutboxClaim {
        try await mapped { () async throws(PostgresStoreError) in try await store.claimOutbox(id, lease: lease, now: now) }
    }

    public func completeOutbox(_ id: UInt64) async throws(StoreError) -> Bool {
        try await mapped { () async throws(PostgresStoreError) in try await store.completeOutbox(id) }
    }

    public func releaseOutbox(_ id: UInt64, retryAt: Int64, now: Int64) async throws(StoreError) {
        try await mapped { () async throws(PostgresStoreError) in try await store.failOutbox(id, retryAfter: max(0, retryAt - now), now: now) }
    }
}
