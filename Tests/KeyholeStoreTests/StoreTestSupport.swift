import Foundation
import KeyholeTestSupport
import Logging
import Testing
@testable import KeyholeStore

/// A state directory under /tmp, removed by `cleanUp`.
struct TemporaryStateDirectory {
    let path: String

    init() throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("kh-store-\(UUID())").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    }

    func cleanUp() { try? FileManager.default.removeItem(atPath: path) }

    /// Every byte of every file under the directory.
    func allBytes() throws -> [UInt8] {
        var bytes: [UInt8] = []
        let enumerator = FileManager.default.enumerator(atPath: path)
        while let name = enumerator?.nextObject() as? String {
            var isDirectory: ObjCBool = false
            let file = path + "/" + name
            if FileManager.default.fileExists(atPath: file, isDirectory: &isDirectory), !isDirectory.boolValue {
                bytes += try Data(contentsOf: URL(fileURLWithPath: file))
            }
        }
        return bytes
    }
}

/// `Store.open` on a directory this process has just released. A child another test spawns shares
/// every open file description of this process from fork until its exec closes the close-on-exec
/// ones, flocks included; the kernel lets posix_spawn return (ending `withoutSpawning`'s hold) a
/// moment before that close. So the lock may still be held by such a child for that moment: `.locked`
/// is tried again for up to 2 s, which a lock genuinely held by a store never outlasts in these tests.
func openStore(
    _ path: String, configuration: Store.Configuration = Store.Configuration(), repair: Bool = false, now: Int64
) throws(StoreError) -> (Store, Store.OpenReport) {
    let deadline = ContinuousClock.now + .seconds(2)
    while true {
        do throws(StoreError) {
            return try ChildProcess.withoutSpawning { () throws(StoreError) in
                try Store.open(stateDirectory: path, configuration: configuration, repair: repair, now: now)
            }
        } catch where error == StoreError.locked("") && ContinuousClock.now < deadline {
            usleep(5_000)
        }
    }
}

/// A store with its committer running, stopped (everything flushed) by `close`.
final class RunningStore: Sendable {
    let store: Store
    let report: Store.OpenReport
    private let finished: AsyncStream<Void>
    private let finish: AsyncStream<Void>.Continuation

    init(_ directory: TemporaryStateDirectory, configuration: Store.Configuration = Store.Configuration(), repair: Bool = false, now: Int64) throws {
        (store, report) = try openStore(directory.path, configuration: configuration, repair: repair, now: now)
        (finished, finish) = AsyncStream<Void>.makeStream()
        let finish = self.finish
        store.startCommitter(logger: Logger(label: "test")) { finish.finish() }
    }

    func close() async {
        store.stop()
        for await _ in finished {}
        store.lock.release()
    }
}

/// Runs a store change and waits until it is durable (or failed).
func durably<R: Sendable>(_ body: (@escaping Store.Completion) throws(StoreError) -> R) async throws -> R {
    let (stream, continuation) = AsyncStream<Result<Void, StoreError>>.makeStream()
    let result = try body { outcome in
        continuation.yield(outcome)
        continuation.finish()
    }
    for await outcome in stream {
        try outcome.get()
        return result
    }
    throw StoreError.io("the completion never ran")
}

/// Waits until `store`'s committer thread waits for work: before that, its first pass (or the one
/// after a probe) may take a queued change itself, which is right but not what a test means to see.
func committerIdle(_ store: Store) async throws {
    if try await !eventually({ store.state.withLock { $0.committerWaiting && $0.committerBusySince == nil } }) {
        Issue.record("the committer never went idle")
    }
}

/// Waits, checking every millisecond for up to 30 s, until `condition` holds; whether it did. What the
/// test expects afterwards is its own to check.
@discardableResult
func eventually(_ condition: () -> Bool) async throws -> Bool {
    let deadline = ContinuousClock.now + .seconds(30)
    while !condition() {
        guard ContinuousClock.now < deadline else { return false }
        try await Task.sleep(for: .milliseconds(1))
    }
    return true
}
