import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// keyholed on a disk whose fdatasync is slow. keyholed offers no way to slow its syncs (the store's
/// syncData failpoint is for in-process tests only), so the kernel's own call is slowed: strace's
/// fault injection delays every fdatasync of keyholed's by 20 ms on its way out, on a real file.
@Suite("a slow disk, end to end", .serialized, .ownThreads)
struct SlowDiskEndToEndTests {
    static let strace = "/usr/bin/strace"

    /// The pid of the process `launcher` started (strace's only child), as strace does not pass on SIGTERM.
    static func child(of launcher: pid_t) -> pid_t? {
        let children = try? String(contentsOfFile: "/proc/\(launcher)/task/\(launcher)/children", encoding: .utf8)
        return children?.split(separator: " ").first.flatMap { pid_t($0) }
    }

    @Test("syncs of 20 ms: storage.slow_sync is logged with their average, commits go to the committer thread (an inline pause), and every create still succeeds")
    func slowSync() throws {
        let daemon = try DaemonProcess(config: "", launcher: [
            Self.strace, "-f", "--seccomp-bpf", "-qq", "-o", "/dev/null", "-e", "trace=fdatasync",
            "-e", "inject=fdatasync:delay_exit=20000",
        ])
        try daemon.waitUntilReady()
        let keyholed = try #require(Self.child(of: daemon.pid))
        let connection = try RawConnection(path: daemon.socketPath)
        // The event loop commits these itself at first; the first slow sync is enough (20 ms against
        // a limit of 2 ms on an average over about eight).
        for number in 0..<3 {
            #expect(try connection.result("session.create", ["sub": .string("slow-\(number)")])["session"]?.stringValue != nil)
        }
        try daemon.waitForStderr(containing: "storage.slow_sync")
        let line = try #require(AccessEndToEndTests.line(daemon, "storage.slow_sync"))
        #expect(line.contains(" warning storage.slow_sync ") && line.contains("committer_thread_for_s=10"), "\(line)")
        let average = line.split(separator: " ").first { $0.hasPrefix("average_sync_ms=") }.flatMap { Double($0.dropFirst(16)) }
        // Every sync took at least the 20 ms injected: the average is over the 2 ms limit.
        #expect((average ?? 0) > 2, "\(line)")

        // Commits now go to the committer thread, and still succeed (durably: they are read back).
        for number in 3..<6 {
            #expect(try connection.result("session.create", ["sub": .string("slow-\(number)")])["session"]?.stringValue != nil)
        }
        let store = try connection.result("stats")["store"]
        #expect(store?["inline_pauses"] == 1, "\(store?.jsonText ?? "no store in stats")")
        #expect(store?["failing"] == false)
        #expect(try connection.result("user.get", ["sub": "slow-5"])["sub"] == "slow-5")

        kill(keyholed, SIGTERM)
        #expect(try daemon.waitForExit() == 0)
    }
}
