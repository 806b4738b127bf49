import KeyholeStore
import NIOCore

extension PostgresStore {
    /// This store as the server sees every store (`SessionStoring`).
    public var storing: PostgresSessionStoring { PostgresSessionStoring(store: self) }
}

/// `PostgresStore` behind `SessionStoring`: its errors become the `StoreError`s every store reports
/// (all of them `storage_unavailable` to a client, with what happened in the message: a database
/// that cannot be reached, a statement it refused, a row keyholed cannot read).
public struct PostgresSessionStoring: SessionStoring {
    public let store: PostgresStore

    func mapped<Value>(_ body: () async throws(PostgresStoreError) -> Value) async throws(StoreError) -> Value {
        do {
            return try await body()
        } catch {
            throw StoreError.unavailable(error.message)
        }
    }

    public func createSession(for principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?) async throws(StoreError)
        -> (token: String, session: Session)
    {
        try await mapped { () async throws(PostgresStoreError) in try await store.createSession(for: principal, now: now, ttl: ttl, idle: idle, data: data) }
    }

    public func createSession(
        for principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?,
        completion: @escaping @Sendable (Result<(token: String, session: Session), StoreError>) -> Void
    ) {
        store.createSession(for: principal, now: now, ttl: ttl, idle: idle, data: data) { outcome in
            completion(outcome.mapError { StoreError.unavailable($0.message) })
        }
    }

    public func session(
        token: String, now: Int64, completion: @escaping @Sendable (Result<(session: Session, user: User?)?, StoreError>) -> Void
    ) {
        store.session(token: token, now: now) { outcome in completion(outcome.mapError { StoreError.unavailable($0.message) }) }
    }

    public func sessionWithoutWaiting(token: String, now: Int64) -> ImmediateSession {
        store.sessionWithoutWaiting(token: token, now: now)
    }

    public func getSession(
        token: UnsafeRawBufferPointer, now: Int64, into buffer: inout ByteBuffer,
        later: () -> @Sendable (Result<(session: Session, user: User?)?, StoreError>) -> Void
    ) -> SessionGet {
        store.getSession(token: token, now: now, into: &buffer) {
            let completion = later()
            return { outcome in completion(outcome.mapError { StoreError.unavailable($0.message) }) }
        }
    }

    public func session(token: String, now: Int64) async throws(StoreError) -> (session: Session, user: User?)? {
        try await mapped { () async throws(PostgresStoreError) in try await store.session(token: token, now: now) }
    }

    public func revokeSession(token: String, now: Int64) async throws(StoreError) -> Bool {
        try await mapped { () async throws(PostgresStoreError) in try await store.revokeSession(token: token, now: now) }
    }

    public func revokeSession(id: SessionID, now: Int64) async throws(StoreError) -> Bool {
        try await mapped { () async throws(PostgresStoreError) in try await store.revokeSession(id: id, now: now) }
    }

    public func revokeSessions(of principal: Principal, now: Int64) async throws(StoreError) -> Int {
        try await mapped { () async throws(PostgresStoreError) in try await store.revokeSessions(of: principal, now: now) }
    }

    public func sessions(of principal: Principal, now: Int64) async throws(StoreError) -> [Session] {
        try await mapped { () async throws(PostgresStoreError) in try await store.sessions(of: principal, now: now) }
    }

    public func user(_ principal: Principal) async throws(StoreError) -> User? {
        try await mapped { () async throws(PostgresStoreError) in try await store.user(principal) }
    }

    public func updateUser(_ principal: Principal, now: Int64, _ update: @escaping @Sendable (inout User) -> Void) async throws(StoreError)
        -> (user: User, created: Bool)
    {
        try await mapped { () async throws(PostgresStoreError) in try await store.updateUser(principal, now: now, update) }
    }

    public func deleteUser(_ principal: Principal, now: Int64) async throws(StoreError) -> (deleted: Bool, sessions: Int) {
        try await mapped { () async throws(PostgresStoreError) in try await store.deleteUser(principal, now: now) }
    }
}
