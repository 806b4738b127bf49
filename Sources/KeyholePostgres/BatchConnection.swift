import Logging
import NIOCore
import PostgresNIO

/// One connection of a `StatementBatcher`, driven on its event loop through postgres-nio's
/// EventLoopFuture interface (POSTGRES.md, "Cost per request"): made when a batch first needs it,
/// its schema checked and its one statement prepared, then kept until it fails, or a batch on it
/// overruns its bound (making it included: `abandon`), or the store shuts down.
final class BatchConnection: Sendable {
    private enum State {
        case none
        /// Being made (`attempt`), the connection once there is one (its schema checked and its
        /// statement prepared next).
        case connecting(attempt: UInt64, PostgresConnection?)
        case ready(PostgresConnection, PreparedQuery)
        case shutDown
    }

    private struct Slot {
        var state = State.none
        /// One more for each connection begun: one that comes after it was given up is closed.
        var attempts: UInt64 = 0
    }

    let eventLoop: any EventLoop
    private let configuration: PostgresConnection.Configuration
    private let sql: String
    private let schema: SchemaName
    private let id: Int
    private let logger: Logger
    /// Touched on `eventLoop` only.
    private let slot: NIOLoopBoundBox<Slot>

    init(eventLoop: any EventLoop, configuration: PostgresConnection.Configuration, sql: String, schema: SchemaName, id: Int, logger: Logger) {
        self.eventLoop = eventLoop
        self.configuration = configuration
        self.sql = sql
        self.schema = schema
        self.id = id
        self.logger = logger
        slot = .makeBoxSendingValue(Slot(), eventLoop: eventLoop)
    }

    /// The connection's prepared statement, the connection made first if there is none (or it
    /// closed). On `eventLoop`, for one batch at a time.
    func statement() -> EventLoopFuture<PreparedQuery> {
        let stale: PostgresConnection?
        switch slot.value.state {
        case .ready(let connection, let statement) where !connection.isClosed: return eventLoop.makeSucceededFuture(statement)
        case .shutDown: return eventLoop.makeFailedFuture(PostgresStoreError.unavailable("the store is shut down"))
        case .ready(let connection, _): stale = connection
        case .connecting(_, let connection): stale = connection
        case .none: stale = nil
        }
        slot.value.attempts += 1
        let attempt = slot.value.attempts
        slot.value.state = .connecting(attempt: attempt, nil)
        // Closed only once the slot no longer names it (see `abandon`).
        if let stale { Self.close(stale) }
        let logger = self.logger, schema = self.schema, sql = self.sql, slot = self.slot
        /// Whether `attempt` is still the one wanted (not given up, nor the store shut down).
        @Sendable func current() -> Bool {
            if case .connecting(attempt, _) = slot.value.state { return true }
            return false
        }
        return PostgresConnection.connect(on: eventLoop, configuration: configuration, id: id, logger: logger).flatMap { connection in
            guard current() else {
                Self.close(connection)
                return connection.eventLoop.makeFailedFuture(PostgresStoreError.unavailable("a batch connection was given up while it was being made"))
            }
            slot.value.state = .connecting(attempt: attempt, connection)
            return connection.query("SELECT current_schema()", logger: logger).flatMapThrowing { result in
                let found = try result.rows.first?.decode(String?.self) ?? nil
                // As `PostgresStore.checkSearchPath`: the statement's SQL names no schema.
                guard found == schema.name else {
                    throw PostgresStoreError.refused(
                        "a batch connection resolves names in schema '\(found ?? "none")', not '\(schema.name)': its search_path must be the schema")
                }
            }.flatMap {
                connection.prepare(query: sql)
            }.flatMapThrowing { statement in
                guard current() else { throw PostgresStoreError.unavailable("a batch connection was given up while it was being made") }
                slot.value.state = .ready(connection, statement)
                return statement
            }.flatMapErrorThrowing { error in
                if current() { slot.value.state = .none }
                Self.close(connection)
                throw error
            }
        }
    }

    /// Closes the connection a batch overran its bound on, or the one being made for it (its
    /// statement fails; the next batch makes a new one). On `eventLoop`.
    func abandon() {
        let abandoned: PostgresConnection?
        switch slot.value.state {
        case .ready(let connection, _): abandoned = connection
        case .connecting(_, let connection): abandoned = connection
        case .none, .shutDown: return
        }
        // The slot forgets the connection before it is closed: closing fails the query in flight at
        // once, on this loop, and that failure ends the batch and starts the next one (a call that
        // waited behind it) before `close` returns. Still named here, the connection, not yet
        // inactive, would take that batch, which would then fail with "connection closed".
        slot.value.state = .none
        logger.warning("postgres.batch_connection_abandoned", metadata: ["connection": "\(id)"])
        if let abandoned { Self.close(abandoned) }
    }

    /// Closes the connection for good: a later batch fails at once. A store must be shut down
    /// before it goes: postgres-nio requires a connection closed before it is released.
    func shutDown() -> EventLoopFuture<Void> {
        eventLoop.flatSubmit { [slot] in
            let state = slot.value.state
            slot.value.state = .shutDown
            switch state {
            case .ready(let connection, _): return Self.close(connection)
            case .connecting(_, let connection?): return Self.close(connection)
            case .connecting(_, nil), .none, .shutDown: return self.eventLoop.makeSucceededVoidFuture()
            }
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
