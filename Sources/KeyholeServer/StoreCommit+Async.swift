import KeyholeProtocol
import KeyholeStore
import KeyholeIssuers

extension StoreCommit {
    /// Runs `change` and returns its value once the change is durable (or needed no write), for
    /// operations that already run in a task.
    static func awaiting<Value: Sendable>(
        _ change: (@escaping Store.Completion) throws(StoreError) -> Value
    ) async throws(ProtocolError) -> Value {
        let completion = FirstOutcome<Result<Void, StoreError>>()
        let value: Value
        do {
            value = try change { completion.finish($0) }
        } catch {
            throw protocolError(error)
        }
        if case .failure(let error) = await completion.wait() { throw protocolError(error) }
        return value
    }
}
