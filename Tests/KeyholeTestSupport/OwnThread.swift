import Foundation

/// Runs a test's blocking work in its task but on a thread of its own, not on one of the few
/// cooperative threads every test's tasks share (as many as the machine has cores: two here).
///
/// A synchronous test blocks the cooperative thread it runs on for as long as it waits (on
/// keyholed's answers, on semaphores). One that waits for minutes leaves the whole process a
/// thread short, and async tests beside it (PostgreSQL's, the store's) past their time limits:
/// CI failed so, twice, with the 20 rounds of kill -9 (two to three minutes under load) beside
/// PostgreSQL's suites. Unlike a bare `Thread`, the work stays in the test's task (a task executor
/// preference), so `#expect` and `#require` record their issues against the test as usual.
package func onOwnThread<Value>(_ body: () throws -> Value) async throws -> Value {
    try await withTaskExecutorPreference(GrowingThreadPool.shared) { try body() }
}
