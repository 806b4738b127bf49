import KeyholeProtocol
import NIOCore

/// Users and sessions as the server's operations use them, whatever keeps them: the local `Store`
/// (the write-ahead log and snapshots) or PostgreSQL (`KeyholePostgres`). Every method answers once
/// its change is durable; every failure to reach or use the storage is a `StoreError`, answered
/// `storage_unavailable`. One suite of tests runs against each implementation
/// (Tests/KeyholePostgresTests/StoreContractTests.swift).
///
/// The local store also has synchronous paths (`session.get` written straight into the answer)
/// that stay its own: they are what makes it fast, and nothing else could offer them.
public protocol SessionStoring: Sendable {
    /// Creates a session for `principal` (and the user's record when missing, stamping their login);
    /// its token, shown once, and the session.
    func createSession(for principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?) async throws(StoreError)
        -> (token: String, session: Session)
    /// The live session `token` names and its user's record, marked as used; `nil` for an unknown,
    /// revoked or expired session alike.
    func session(token: String, now: Int64) async throws(StoreError) -> (session: Session, user: User?)?
    /// Revokes the session `token` names; whether there was a live one.
    func revokeSession(token: String, now: Int64) async throws(StoreError) -> Bool
    /// Revokes session `id`; whether there was a live one.
    func revokeSession(id: SessionID, now: Int64) async throws(StoreError) -> Bool
    /// Revokes every session of `principal`; how many were live.
    func revokeSessions(of principal: Principal, now: Int64) async throws(StoreError) -> Int
    /// The live sessions of `principal`, oldest first.
    func sessions(of principal: Principal, now: Int64) async throws(StoreError) -> [Session]
    /// `principal`'s record, if any.
    func user(_ principal: Principal) async throws(StoreError) -> User?
    /// Changes `principal`'s record with `update`, creating it when missing; nothing is written when
    /// nothing changes. The record and whether it was created.
    func updateUser(_ principal: Principal, now: Int64, _ update: @escaping @Sendable (inout User) -> Void) async throws(StoreError)
        -> (user: User, created: Bool)
    /// Deletes `principal`'s record and sessions; whether there was anything, and how many live
    /// sessions went.
    func deleteUser(_ principal: Principal, now: Int64) async throws(StoreError) -> (deleted: Bool, sessions: Int)

    /// `createSession(for:now:ttl:idle:data:)`, its outcome handed to `completion` (once, from any thread).
    func createSession(
        for principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?,
        completion: @escaping @Sendable (Result<(token: String, session: Session), StoreError>) -> Void)

    /// `session(token:now:)`, its outcome handed to `completion` (once, from any thread).
    func session(
        token: String, now: Int64, completion: @escaping @Sendable (Result<(session: Session, user: User?)?, StoreError>) -> Void)

    /// `session(token:now:)` when it can be answered without waiting (PostgreSQL's per-host cache,
    /// while fresh), so that the hot path pays for no task; `.mustWait` otherwise.
    func sessionWithoutWaiting(token: String, now: Int64) -> ImmediateSession

    /// session.get for `token` (its UTF-8 bytes, where they lie in the request), in one call: its
    /// answer (`Session.writeGetJSON`) written into `buffer` when the store has it at once
    /// (PostgreSQL's cache while it is fresh), `.notFound` for no live session; else `.later`, and
    /// the completion `later` makes (called only then, so that an answer at once allocates none) has
    /// the answer `session(token:now:)` would give (once, from any thread). The token is hashed once,
    /// however the call ends (and PostgreSQL's store takes its cache's lock once).
    func getSession(
        token: UnsafeRawBufferPointer, now: Int64, into buffer: inout ByteBuffer,
        later: () -> @Sendable (Result<(session: Session, user: User?)?, StoreError>) -> Void
    ) -> SessionGet
}

extension SessionStoring {
    /// Never without waiting, unless the store says otherwise.
    public func sessionWithoutWaiting(token: String, now: Int64) -> ImmediateSession { .mustWait }

    /// `sessionWithoutWaiting`, then `session(token:now:completion:)`, unless the store can do with less.
    public func getSession(
        token: UnsafeRawBufferPointer, now: Int64, into buffer: inout ByteBuffer,
        later: () -> @Sendable (Result<(session: Session, user: User?)?, StoreError>) -> Void
    ) -> SessionGet {
        let text = String(decoding: token, as: UTF8.self)
        switch sessionWithoutWaiting(token: text, now: now) {
        case .found(let session, let user):
            session.writeGetJSON(user: user, to: &buffer)
            return .written
        case .notFound: return .notFound
        case .mustWait:
            session(token: text, now: now, completion: later())
            return .later
        }
    }

    /// `createSession(for:now:ttl:idle:data:)`, its outcome handed to `completion` (once, from any
    /// thread): in a task of its own, unless the store can do with less.
    public func createSession(
        for principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?,
        completion: @escaping @Sendable (Result<(token: String, session: Session), StoreError>) -> Void
    ) {
        Task {
            do throws(StoreError) {
                completion(.success(try await createSession(for: principal, now: now, ttl: ttl, idle: idle, data: data)))
            } catch {
                completion(.failure(error))
            }
        }
    }

    /// `session(token:now:)`, its outcome handed to `completion` (once, from any thread): in a task
    /// of its own, unless the store can do with less.
    public func session(
        token: String, now: Int64, completion: @escaping @Sendable (Result<(session: Session, user: User?)?, StoreError>) -> Void
    ) {
        Task {
            do throws(StoreError) {
                completion(.success(try await session(token: token, now: now)))
            } catch {
                completion(.failure(error))
            }
        }
    }
}

/// What `SessionStoring.sessionWithoutWaiting(token:now:)` found.
public enum ImmediateSession: Sendable {
    /// The live session and its user's record, marked as used.
    case found(Session, User?)
    /// No live session (unknown, revoked or expired alike).
    case notFound
    /// Only `session(token:now:)` can tell.
    case mustWait
}

/// How `SessionStoring.getSession(token:now:into:later:)` answered.
public enum SessionGet: Sendable, Equatable {
    /// The live session's answer is written.
    case written
    /// No live session (unknown, revoked or expired alike); nothing written.
    case notFound
    /// Nothing written: the completion has the answer.
    case later
}

/// What a store's answer written in place from its cache did (`PostgresStore.writeSessionWithoutWaiting`).
public enum ImmediateWrite: Sendable, Equatable {
    /// The live session's answer is written.
    case written
    /// No live session (unknown, revoked or expired alike); nothing written.
    case notFound
    /// Nothing written: the long way must tell.
    case mustWait
}

extension Store {
    /// This store as `SessionStoring`: each answer awaited until what it rests on is durable.
    public var awaited: AwaitedStore { AwaitedStore(store: self) }

    /// Runs `change` (one of this store's methods, given its completion) and returns its value once
    /// what it did is durable (or needed no write), for callers that run in a task.
    public static func durably<Value: Sendable>(
        _ change: (@escaping Completion) throws(StoreError) -> Value
    ) async throws(StoreError) -> Value {
        let completion = FirstOutcome<Result<Void, StoreError>>()
        let value = try change { completion.finish($0) }
        try await completion.wait().get()
        return value
    }
}

/// The local store behind `SessionStoring` (a view, not a conformance of `Store` itself, whose
/// synchronous methods of the same names an async caller would otherwise no longer reach).
public struct AwaitedStore: SessionStoring {
    public let store: Store

    private func durable<Value: Sendable>(_ body: (@escaping Store.Completion) throws(StoreError) -> Value) async throws(StoreError) -> Value {
        try await Store.durably(body)
    }

    public func createSession(for principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?) async throws(StoreError)
        -> (token: String, session: Session)
    {
        try await durable { done throws(StoreError) in try store.createSession(for: principal, now: now, ttl: ttl, idle: idle, data: data, completion: done) }
    }

    public func session(token: String, now: Int64) async throws(StoreError) -> (session: Session, user: User?)? {
        var found: (session: Session, user: User?)?
        try await durable { done throws(StoreError) in
            found = store.observing({ store.session(token: token, now: now) }, completion: done)
        }
        return found
    }

    public func revokeSession(token: String, now: Int64) async throws(StoreError) -> Bool {
        try await durable { done throws(StoreError) in try store.revokeSession(token: token, now: now, completion: done) }
    }

    public func revokeSession(id: SessionID, now: Int64) async throws(StoreError) -> Bool {
        try await durable { done throws(StoreError) in try store.revokeSession(id: id, now: now, completion: done) }
    }

    public func revokeSessions(of principal: Principal, now: Int64) async throws(StoreError) -> Int {
        try await durable { done throws(StoreError) in try store.revokeSessions(of: principal, now: now, completion: done) }
    }

    public func sessions(of principal: Principal, now: Int64) async throws(StoreError) -> [Session] {
        var found: [Session] = []
        try await durable { done throws(StoreError) in
            found = store.observing({ store.sessions(of: principal, now: now) }, completion: done)
        }
        return found
    }

    public func user(_ principal: Principal) async throws(StoreError) -> User? {
        var found: User?
        try await durable { done throws(StoreError) in
            found = store.observing({ store.user(principal) }, completion: done)
        }
        return found
    }

    public func updateUser(_ principal: Principal, now: Int64, _ update: @escaping @Sendable (inout User) -> Void) async throws(StoreError)
        -> (user: User, created: Bool)
    {
        try await durable { done throws(StoreError) in try store.updateUser(principal, now: now, completion: done, update) }
    }

    public func deleteUser(_ principal: Principal, now: Int64) async throws(StoreError) -> (deleted: Bool, sessions: Int) {
        try await durable { done throws(StoreError) in try store.deleteUser(principal, now: now, completion: done) }
    }
}
