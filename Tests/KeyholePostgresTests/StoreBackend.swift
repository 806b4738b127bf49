import Foundation
import KeyholePostgres
import KeyholeStore
import KeyholeTestSupport
import Logging
import PostgresNIO
import Testing

/// One store for the contract suite, local or PostgreSQL, behind the async operations both offer:
/// the shape of the interface the server will use (POSTGRES.md, "What holds in both backends").
protocol StoreBackend: Sendable {
    func createSession(_ principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?) async throws -> (token: String, session: Session)
    func session(_ token: String, now: Int64) async throws -> (session: Session, user: User?)?
    func revoke(token: String, now: Int64) async throws -> Bool
    func revoke(id: SessionID, now: Int64) async throws -> Bool
    func revokeAll(_ principal: Principal, now: Int64) async throws -> Int
    func sessions(of principal: Principal, now: Int64) async throws -> [Session]
    func user(_ principal: Principal) async throws -> User?
    func updateUser(_ principal: Principal, now: Int64, _ update: @escaping @Sendable (inout User) -> Void) async throws -> (user: User, created: Bool)
    func deleteUser(_ principal: Principal, now: Int64) async throws -> (deleted: Bool, sessions: Int)
}

enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case local, postgres

    var testDescription: String { rawValue }

    /// A fresh store of this kind for `body`: an empty state directory, or a new cluster with the
    /// schema migrated.
    func with(_ body: @escaping @Sendable (any StoreBackend) async throws -> Void) async throws {
        switch self {
        case .local:
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kh-contract-\(UUID())").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let (store, _) = try Store.open(stateDirectory: directory, now: 1_800_000_000)
            let committer = Task { await StoreCommitter(store: store, logger: PostgresTestDatabase.logger).run() }
            defer { committer.cancel() }
            try await body(LocalBackend(store: store))
        case .postgres:
            let cluster = try await PostgresCluster.start()
            try await PostgresTestDatabase.with(PostgresTestDatabase.configuration(cluster)) { client in
                _ = try await SchemaMigrator(schema: .standard, appliedBy: "contract", now: { 0 }, logger: PostgresTestDatabase.logger).migrate(client)
                try await body(PostgresStore(client: client, now: PostgresTestDatabase.clock, logger: PostgresTestDatabase.logger))
            }
            _ = await cluster.close()
        }
    }
}

/// The local store, each change awaited until it is durable.
struct LocalBackend: StoreBackend {
    let store: Store

    /// `body`'s value once the change it made is durable.
    private func durable<R: Sendable>(_ body: (@escaping Store.Completion) throws -> R) async throws -> R {
        let (outcomes, continuation) = AsyncStream<Result<Void, StoreError>>.makeStream()
        let value = try body { outcome in
            continuation.yield(outcome)
            continuation.finish()
        }
        for await outcome in outcomes { try outcome.get() }
        return value
    }

    func createSession(_ principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?) async throws -> (token: String, session: Session) {
        try await durable { try store.createSession(for: principal, now: now, ttl: ttl, idle: idle, data: data, completion: $0) }
    }
    func session(_ token: String, now: Int64) async throws -> (session: Session, user: User?)? { store.session(token: token, now: now) }
    func revoke(token: String, now: Int64) async throws -> Bool { try await durable { try store.revokeSession(token: token, now: now, completion: $0) } }
    func revoke(id: SessionID, now: Int64) async throws -> Bool { try await durable { try store.revokeSession(id: id, now: now, completion: $0) } }
    func revokeAll(_ principal: Principal, now: Int64) async throws -> Int {
        try await durable { try store.revokeSessions(of: principal, now: now, completion: $0) }
    }
    func sessions(of principal: Principal, now: Int64) async throws -> [Session] { store.sessions(of: principal, now: now) }
    func user(_ principal: Principal) async throws -> User? { store.user(principal) }
    func updateUser(_ principal: Principal, now: Int64, _ update: @escaping @Sendable (inout User) -> Void) async throws -> (user: User, created: Bool) {
        try await durable { try store.updateUser(principal, now: now, completion: $0, update) }
    }
    func deleteUser(_ principal: Principal, now: Int64) async throws -> (deleted: Bool, sessions: Int) {
        try await durable { try store.deleteUser(principal, now: now, completion: $0) }
    }
}

extension PostgresStore: StoreBackend {
    func createSession(_ principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?) async throws -> (token: String, session: Session) {
        try await createSession(for: principal, now: now, ttl: ttl, idle: idle, data: data)
    }
    func session(_ token: String, now: Int64) async throws -> (session: Session, user: User?)? { try await session(token: token, now: now) }
    func revoke(token: String, now: Int64) async throws -> Bool { try await revokeSession(token: token, now: now) }
    func revoke(id: SessionID, now: Int64) async throws -> Bool { try await revokeSession(id: id, now: now) }
    func revokeAll(_ principal: Principal, now: Int64) async throws -> Int { try await revokeSessions(of: principal, now: now) }
}
