import PostgresNIO

/// Why the PostgreSQL store could not do what it was asked. `isUnavailable` errors are answered
/// `storage_unavailable` (retry later); the others are configuration or data problems an operator
/// must fix, and stop keyholed at start.
public struct PostgresStoreError: Error, Sendable, Equatable, CustomStringConvertible {
    private enum Code: Sendable, Equatable {
        /// The database could not be reached, or the call took longer than its bound.
        case unavailable
        /// The database's schema was made by a newer keyholed.
        case schemaTooNew
        /// The database refused a statement (permissions, a conflicting object): its SQLSTATE.
        case refused
        /// A row or a table holds what this keyholed cannot read.
        case corrupt
    }

    private let code: Code
    /// What happened, for the log and the operator: never a token or a password.
    public let message: String
    /// PostgreSQL's SQLSTATE, when the server refused something.
    public let sqlState: String?

    private init(_ code: Code, _ message: String, sqlState: String? = nil) {
        self.code = code
        self.message = message
        self.sqlState = sqlState
    }

    /// The database could not be reached, or did not answer in time.
    public static func unavailable(_ message: String) -> PostgresStoreError { PostgresStoreError(.unavailable, message) }
    /// The schema is at `found`, above the newest this binary knows (`known`).
    public static func schemaTooNew(found: Int, known: Int) -> PostgresStoreError {
        PostgresStoreError(
            .schemaTooNew, "the database's schema is version \(found), this keyholed knows up to \(known): upgrade keyholed")
    }
    /// A row or table this binary cannot read.
    public static func corrupt(_ message: String) -> PostgresStoreError { PostgresStoreError(.corrupt, message) }
    /// The database, or what stands between keyholed and it, refuses what keyholed needs.
    public static func refused(_ message: String) -> PostgresStoreError { PostgresStoreError(.refused, message) }

    public var isUnavailable: Bool { code == .unavailable }
    public var isSchemaTooNew: Bool { code == .schemaTooNew }
    public var isRefused: Bool { code == .refused }
    public var isCorrupt: Bool { code == .corrupt }

    public var description: String { message }

    public static func == (lhs: PostgresStoreError, rhs: PostgresStoreError) -> Bool { lhs.code == rhs.code }

    /// `error` (postgres-nio's, or a timeout's) as the store reports it, `doing` what.
    static func from(_ error: any Error, doing: String) -> PostgresStoreError {
        if let known = error as? PostgresStoreError { return known }
        // withTransaction's wrapper: what failed first says why (a failed rollback only follows it).
        if let transaction = error as? PostgresTransactionError,
            let cause = transaction.beginError ?? transaction.closureError ?? transaction.commitError ?? transaction.rollbackError
        {
            return from(cause, doing: doing)
        }
        if let psql = error as? PSQLError {
            if psql.code == .server, let info = psql.serverInfo {
                let state = info[.sqlState] ?? "?"
                return PostgresStoreError(.refused, "\(doing): PostgreSQL refused it (\(state)): \(info[.message] ?? "")", sqlState: state)
            }
            // Connection-level: closed, refused, TLS, authentication before any server message.
            return .unavailable("\(doing): \(psql.code)")
        }
        // The EventLoopFuture interface's (the batches', `BatchConnection`) form of the same.
        if case .server(let info) = error as? PostgresError {
            let state = info.fields[.sqlState] ?? "?"
            return PostgresStoreError(.refused, "\(doing): PostgreSQL refused it (\(state)): \(info.fields[.message] ?? "")", sqlState: state)
        }
        return .unavailable("\(doing): \(error)")
    }
}
