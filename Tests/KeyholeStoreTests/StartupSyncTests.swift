import Foundation
import Synchronization
import Testing
@testable import KeyholeStore

/// What start-up makes durable before the store serves: the directories it creates, in their parents,
/// and the log it replayed.
@Suite("What start-up makes durable")
struct StartupSyncTests {
    let now: Int64 = 1_800_000_000

    /// What a sync failpoint saw, in order.
    final class Calls: Sendable {
        private let calls = Mutex<[String]>([])
        func append(_ call: String) { calls.withLock { $0.append(call) } }
        var all: [String] { calls.withLock { $0 } }
    }

    /// The file an open descriptor refers to.
    static func path(of fd: Int32) -> String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")) ?? "fd \(fd)"
    }

    @Test("a new state directory: wal/ and snapshots/ are made durable in it once they exist, and it in its parent")
    func directories() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let parent = (directory.path as NSString).deletingLastPathComponent
        let calls = Calls()
        var configuration = Store.Configuration()
        // Each sync of the state directory notes which of its subdirectories existed by then.
        configuration.syncDirectory = { [path = directory.path] synced in
            if synced == path {
                let present = ["wal", "snapshots"].filter { FileManager.default.fileExists(atPath: path + "/" + $0) }
                calls.append("state with \(present.joined(separator: ","))")
            } else {
                calls.append(synced)
            }
            return WALDirectory.fsyncDirectory(synced)
        }
        let running = try RunningStore(directory, configuration: configuration, now: now)
        #expect(calls.all.first == parent)
        #expect(calls.all.contains("state with wal"))
        _ = try await running.store.snapshot(now: now)
        #expect(calls.all.contains("state with wal,snapshots"))
        await running.close()

        // A directory sync that fails stops start-up: the store would not survive a power cut.
        configuration.syncDirectory = { [path = directory.path] synced in
            if synced == path {
                errno = EIO
                return false
            }
            return WALDirectory.fsyncDirectory(synced)
        }
        do {
            _ = try openStore(directory.path, configuration: configuration, now: now)
            Issue.record("the store opened")
        } catch {
            #expect(error == StoreError.io("") && error.message.contains(directory.path), "\(error)")
        }
    }

    @Test("the log replayed at start-up is synced before the store is handed out; a failed sync stops start-up")
    func replayedTail() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var configuration = Store.Configuration()
        configuration.durability = .off
        var running = try RunningStore(directory, configuration: configuration, now: now)
        var tokens: [String] = []
        for n in 0..<3 {
            let (token, _) = try await durably { [running] done throws(StoreError) in
                try running.store.createSession(
                    for: Principal(issuer: "local", sub: "u\(n)"), now: now, ttl: 3600, idle: 3600, data: nil, completion: done)
            }
            tokens.append(token)
        }
        await running.close()
        let segment = WALDirectory(stateDirectory: directory.path).segmentPath(1)
        let size = try #require(try FileManager.default.attributesOfItem(atPath: segment)[.size] as? Int)

        let calls = Calls()
        configuration.syncData = { fd, range in
            calls.append("\(Self.path(of: fd)) \(range)")
            return fdatasync(fd) == 0
        }
        let (store, report) = try openStore(directory.path, configuration: configuration, now: now)
        #expect(report.replayed == 3)
        // Synced by Store.open itself: no committer runs yet, and nothing was written.
        #expect(calls.all == ["\(segment) \(0..<size)"])
        #expect(tokens.allSatisfy { store.session(token: $0, now: now) != nil })
        store.lock.release()

        configuration.syncData = { _, _ in
            errno = EIO
            return false
        }
        do {
            _ = try openStore(directory.path, configuration: configuration, now: now)
            Issue.record("the store opened")
        } catch {
            #expect(error == StoreError.io("") && error.message.contains(segment), "\(error)")
        }
        running = try RunningStore(directory, now: now)
        #expect(tokens.allSatisfy { running.store.session(token: $0, now: now) != nil })
        await running.close()
    }
}
