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

extension StoreCommit {
    /// Runs `body` (calls to a `SessionStoring` or `AppleStoring`), a store's failure answered as
    /// every store failure is.
    static func stored<Value>(_ body: () async throws(StoreError) -> Value) async throws(ProtocolError) -> Value {
        do {
            return try await body()
        } catch {
            throw protocolError(error)
        }
    }
}
