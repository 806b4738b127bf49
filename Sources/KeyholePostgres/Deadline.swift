import KeyholeProtocol
import NIOCore

/// Every database call is bounded (`[postgres] timeout`, POSTGRES.md "PostgreSQL unreachable"), with
/// the project's `withDeadline`: past its bound the call is `unavailable` and the caller goes on at
/// once; the call is cancelled but not waited for (one stuck on a frozen server may not notice its
/// cancellation for long).
enum Deadline {
    static func run<Value: Sendable>(
        within limit: Duration, doing: String, _ body: @escaping @Sendable () async throws -> Value
    ) async throws(PostgresStoreError) -> Value {
        try await withDeadline(
            TimeAmount(limit),
            timedOut: { .unavailable("\(doing): no answer within \(limit)") },
            cancelled: { .from(CancellationError(), doing: doing) }
        ) { () async throws(PostgresStoreError) -> Value in
            do {
                return try await body()
            } catch {
                throw PostgresStoreError.from(error, doing: doing)
            }
        }
    }
}
