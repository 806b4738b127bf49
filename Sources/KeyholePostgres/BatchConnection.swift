import Logging
import NIOCore
import PostgresNIO

/// One connection of a `StatementBatcher`, driven on its event loop through postgres-nio's
/// EventLoopFuture interface (POSTGRES.md, "Cost per request"): made when a batch first needs it,
/// its schema checked and its one statement prepared, then kept until it fails, or a batch on it
/// overruns its bound, or the store shuts down.
final class BatchConnection: Sendable {
    private enum State {
        case none
        case ready(PostgresConnection, PreparedQuery)
        case shutDown
    }

    let eventLoop: any EventLoop
    private let configuration: PostgresConnection.Configuration
    private let sql: String
    private let schema: SchemaName
    private let id: Int
    private let logger: Logger
    /// Touched on `eventLoop` only.
    private let state: NIOLoopBoundBox<State>

    init(eventLoop: any EventLoop, configuration: PostgresConnection.Configuration, sql: String, schema: SchemaName, id: Int, logger: Logger) {
        self.eventLoop = eventLoop
        self.configuration = configuration
        self.sql = sql
        self.schema = schema
        self.id = id
        self.logger = logger
        state = .makeBoxSendingValue(.none, eventLoop: eventLoop)
    }

    /// The connection's prepared statement, the connection made first if there is none (or it
    /// closed). On `eventLoop`.
    func statement() -> EventLoopFuture<PreparedQuery> {
        switch state.value {
        case .ready(let connection, let statement) where !connection.isClosed: return eventLoop.makeSucceededFuture(statement)
        case .shutDown: return eventLoop.makeFailedFuture(PostgresStoreError.unavailable("the store is shut down"))
        case .ready, .none: break
        }
        state.value = .none
        let logger = self.logger, schema = self.schema, sql = self.sql, state = self.state
        return PostgresConnection.connect(on: eventLoop, configuration: configuration, id: id, logger: logger).flatMap { connection in
            connection.query("SELECT current_schema()", logger: logger).flatMapThrowing { result in
                let found = try result.rows.first?.decode(String?.self) ?? nil
                // As `PostgresStore.checkSearchPath`: the statement's SQL names no schema.
                guard found == schema.name else {
                    throw PostgresStoreError.refused(
                        "a batch connection resolves names in schema '\(found ?? "none")', not '\(schema.name)': its search_path must be the schema")
                }
            }.flatMap {
                connection.prepare(query: sql)
            }.flatMapThrowing { statement in
                if case .shutDown = state.value { throw PostgresStoreError.unavailable("the store is shut down") }
                state.value = .ready(connection, statement)
                return statement
            }.flatMapErrorThrowing { error in
                Self.close(connection)
                throw error
            }
        }
    }

    /// Closes the connection a batch overran its bound on (its statement fails; the next batch
    /// makes a new one). On `eventLoop`.
    func abandon() {
        guard case .ready(let connection, _) = state.value else { return }
        state.value = .none
        logger.warning("postgres.batch_connection_abandoned", metadata: ["connection": "\(id)"])
        Self.close(connection)
    }

    /// Closes the connection for good: a later batch fails at once. A store must be shut down
    /// before it goes: postgres-nio requires a connection closed before it is released.
    func shutDown() -> EventLoopFuture<Void> {
        eventLoop.flatSubmit { [state] in
            defer { state.value = .shutDown }
            guard case .ready(let connection, _) = state.value else { return self.eventLoop.makeSucceededVoidFuture() }
            return Self.close(connection)
        }
    }

    /// Closes `connection`, holding it until it is closed (postgres-nio requires that of a
    /// connection released).
    @discardableResult
    private static func close(_ connection: PostgresConnection) -> EventLoopFuture<Void> {
        let closed: EventLoopFuture<Void> = connection.close()
        return closed.recover { _ in }.map { withExtendedLifetime(connection) {} }
    }
}
