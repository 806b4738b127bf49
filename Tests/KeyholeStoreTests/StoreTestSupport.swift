import Foundation
import KeyholeTestSupport
import Logging
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

/// A store with its committer running, stopped (everything flushed) by `close`.
final class RunningStore: Sendable {
    let store: Store
    let report: Store.OpenReport
    private let finished: AsyncStream<Void>
    private let finish: AsyncStream<Void>.Continuation

    init(_ directory: TemporaryStateDirectory, configuration: Store.Configuration = Store.Configuration(), repair: Bool = false, now: Int64) throws {
        // Not while another test spawns a child, which would hold this directory's lock until its exec.
        (store, report) = try ChildProcess.withoutSpawning {
            try Store.open(stateDirectory: directory.path, configuration: configuration, repair: repair, now: now)
        }
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
