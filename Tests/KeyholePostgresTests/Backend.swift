import Foundation
import KeyholePostgres
import KeyholeStore
import KeyholeTestSupport
import Logging
import PostgresNIO
import Testing

enum Backend: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case local, postgres

    var testDescription: String { rawValue }

    /// A fresh store of this kind, as the server sees it (`AppleStoring`, which is `SessionStoring` and more) for `body`: an empty state directory, or a new cluster with the
    /// schema migrated.
    func with(_ body: @escaping @Sendable (any AppleStoring) async throws -> Void) async throws {
        switch self {
        case .local:
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("kh-contract-\(UUID())").path
            try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(atPath: directory) }
            let (store, _) = try Store.open(stateDirectory: directory, now: 1_800_000_000)
            let committer = Task { await StoreCommitter(store: store, logger: PostgresTestDatabase.logger).run() }
            defer { committer.cancel() }
            try await body(store.awaited)
        case .postgres:
            let cluster = try await PostgresCluster.start()
            try await PostgresTestDatabase.with(PostgresTestDatabase.configuration(cluster)) { client in
                _ = try await SchemaMigrator(schema: .standard, appliedBy: "contract", now: { 0 }, logger: PostgresTestDatabase.logger).migrate(client)
                let store = PostgresTestDatabase.store(client, cluster)
                try await PostgresTestDatabase.shuttingDown([store]) { try await body(store.storing) }
            }
            _ = await cluster.close()
        }
    }
}
