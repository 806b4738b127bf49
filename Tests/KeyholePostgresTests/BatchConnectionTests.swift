import KeyholeTestSupport
import Logging
import NIOCore
import NIOConcurrencyHelpers
import PostgresNIO
import Testing

@testable import KeyholePostgres

extension PostgresSuites {
    /// One batch connection against a real PostgreSQL: what a batch that overran its bound leaves
    /// for the next one.
    @Suite("PostgreSQL batch connection", .serialized)
    struct BatchConnectionTests {
        @Test("abandoned with a query in flight: the batch that query's failure starts at once is not handed the connection being closed")
        func abandonForgetsTheConnectionBeforeClosingIt() async throws {
            let cluster = try await PostgresCluster.start()
            try await PostgresTestDatabase.with(PostgresTestDatabase.configuration(cluster)) { client in
                _ = try await SchemaMigrator(schema: .standard, appliedBy: "test", now: { 0 }, logger: PostgresTestDatabase.logger).migrate(client)
                var configuration = PostgresTestDatabase.connection(cluster)
                configuration.options.additionalStartupParameters = PostgresStore.startupParameters(for: .standard)
                let loop = PostgresClient.defaultEventLoopGroup.next()
                let batch = BatchConnection(
                    eventLoop: loop, configuration: configuration, sql: "SELECT pg_sleep(CASE WHEN $1 THEN 60 ELSE 0 END)", schema: .standard, id: 1,
                    logger: PostgresTestDatabase.logger)
                let statement = try await loop.flatSubmit { batch.statement() }.get()
                // On the loop, as the batcher does: a batch runs the statement; when it fails, the next
                // batch asks for the statement at once. Then the first batch overruns and is abandoned.
                let (handedOver, next) = try await loop.flatSubmit { () -> EventLoopFuture<(Bool, EventLoopFuture<PreparedQuery>?)> in
                    let asked = loop.makePromise(of: (Bool, EventLoopFuture<PreparedQuery>?).self)
                    statement.execute([PostgresData(bool: true)]).whenFailure { _ in
                        let next = batch.statement()
                        // A statement handed over at once is the connection the slot still names.
                        let immediate = NIOLockedValueBox(false)
                        next.whenComplete { _ in immediate.withLockedValue { $0 = true } }
                        asked.succeed((immediate.withLockedValue { $0 }, next))
                    }
                    batch.abandon()
                    return asked.futureResult
                }.get()
                #expect(!handedOver, "the next batch got the connection being closed")
                // The next batch's own connection: made, its statement prepared, and working (not
                // tried on the one being closed, where a query never ends).
                if !handedOver, let fresh = try await next?.get() {
                    let rows = try await fresh.execute([PostgresData(bool: false)]).get()
                    #expect(rows.count == 1)
                }
                try await batch.shutDown().get()
            }
            #expect(await cluster.close() == 0)
        }
    }
}
