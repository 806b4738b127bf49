/// Every database call is bounded (`[postgres] timeout`, POSTGRES.md "PostgreSQL unreachable"): the
/// call races a timer, and whichever ends first decides; the other is cancelled. A call past its
/// bound is `unavailable`, so that no request waits on a database that does not answer.
enum Deadline {
    static func run<Value: Sendable>(
        within limit: Duration, doing: String, _ body: @escaping @Sendable () async throws -> Value
    ) async throws(PostgresStoreError) -> Value {
        do {
            return try await withThrowingTaskGroup(of: Value?.self) { group in
                group.addTask { try await body() }
                group.addTask {
                    try await Task.sleep(for: limit)
                    return nil
                }
                defer { group.cancelAll() }
                // The first to finish: the call's value, or nil from the timer.
                guard let first = try await group.next(), let value = first else {
                    throw PostgresStoreError.unavailable("\(doing): no answer within \(limit)")
                }
                return value
            }
        } catch {
            throw PostgresStoreError.from(error, doing: doing)
        }
    }
}
