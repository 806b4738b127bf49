import KeyholeProtocol
import KeyholeStore

extension StoreCommit {
    /// Runs `change` and returns its value once the change is durable (or needed no write), for
    /// operations that already run in a task.
    static func awaiting<Value: Sendable>(
        _ change: (@escaping Store.Completion) throws(StoreError) -> Value
    ) async throws(ProtocolError) -> Value {
        do {
            return try await Store.durably(change)
        } catch {
            throw protocolError(error)
        }
    }
}
