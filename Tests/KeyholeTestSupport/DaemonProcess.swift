import Foundation
import Synchronization

/// keyholed started as a child process on a temporary socket, as an operator would run it.
///
/// Spawned with posix_spawn and a close-on-exec pipe owned here (Foundation's Process can leave a
/// pipe's write end open in the parent when several children start at once, so end of file never came).
package final class DaemonProcess: Sendable {
    package let directory: URL
    package let socketPath: String
    /// The child's process id.
    package let pid: pid_t
    private let ownsDirectory: Bool
    private let state = StateBox()
    private let readiness = DispatchSemaphore(value: 0)
    private let exited = DispatchSemaphore(value: 0)
    private let stderrClosed = DispatchSemaphore(value: 0)

    private final class StateBox: Sendable {
        let stderr = Mutex("")
        let status = Mutex<Int32?>(nil)
        /// Waiters for text to appear on stderr; taken only while holding `stderr`.
        let watchers = Mutex<[(text: String, signal: DispatchSemaphore)]>([])
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    /// The binary under test: `$KEYHOLED`, else `keyholed` beside the test bundle (both live in .build/debug).
    package static var binary: URL {
        if let path = ProcessInfo.processInfo.environment["KEYHOLED"] { return URL(fileURLWithPath: path) }
        return ChildProcess.builtProduct("keyholed")
    }

    /// A fresh short temporary directory (socket paths are limited to 107 bytes).
    package static func makeDirectory() throws -> URL {
        var template = Array("/tmp/khtest-XXXXXX".utf8CString)
        guard let path = template.withUnsafeMutableBufferPointer({ mkdtemp($0.baseAddress!) }) else {
            throw Failure(description: "mkdtemp failed")
        }
        return URL(fileURLWithPath: String(cString: path))
    }

    /// Starts keyholed with `config` as its file; does not wait for readiness.
    /// - Parameter directory: where the config, socket and state go; one passed in outlives the
    ///   process (a restart on the same state), one made here is removed with it.
    /// - Parameter environment: set for keyholed on top of the test's own.
    /// - Parameter launcher: a command that runs keyholed, its arguments following
    ///   (systemd-socket-activate, a shell that sets LISTEN_PID).
    /// - Parameter listener: a listening socket of the test's, passed as systemd does (fd 3,
    ///   LISTEN_FDS=1, LISTEN_FDNAMES=keyhole, LISTEN_PID set by a shell that then execs keyholed).
    /// - Parameter logLevel: `--log-level`, which wins over the file's at every reload; `nil` leaves
    ///   the level to the file.
    package init(
        config: String = "", arguments: [String] = [], directory: URL? = nil, socketPath: String? = nil,
        environment: [String: String] = [:], launcher: [String] = [], listener: Int32? = nil, logLevel: String? = "debug"
    ) throws {
        ownsDirectory = directory == nil
        self.directory = try directory ?? Self.makeDirectory()
        self.socketPath = socketPath ?? self.directory.appendingPathComponent("k.sock").path
        let configPath = self.directory.appendingPathComponent("keyholed.toml")
        try config.write(to: configPath, atomically: true, encoding: .utf8)
        var environment = environment
        var launcher = launcher
        if listener != nil {
            environment["LISTEN_FDS"] = "1"
            environment["LISTEN_FDNAMES"] = "keyhole"
            launcher = ["/bin/sh", "-c", "LISTEN_PID=$$ exec \"$@\"", "sh"] + launcher
        }
        let argv = launcher + [Self.binary.path,
            "--config", configPath.path, "--socket", self.socketPath,
            "--state-dir", self.directory.appendingPathComponent("state").path,
        ] + (logLevel.map { ["--log-level", $0] } ?? []) + Self.loopArguments + arguments
        let (pid, _, stderrFD) = try ChildProcess.spawn(argv, environment: environment, captureStdout: false, passing: listener)
        self.pid = pid

        let state = self.state
        let readiness = self.readiness
        let stderrClosed = self.stderrClosed
        let reader = Thread {
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = chunk.withUnsafeMutableBytes { read(stderrFD, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }
                let text = String(decoding: chunk[..<count], as: UTF8.self)
                let becameReady = state.stderr.withLock { stderr in
                    let before = stderr.contains("keyholed.ready")
                    stderr += text
                    state.watchers.withLock { watchers in
                        watchers.removeAll { watcher in
                            guard stderr.contains(watcher.text) else { return false }
                            watcher.signal.signal()
                            return true
                        }
                    }
                    return !before && stderr.contains("keyholed.ready")
                }
                if becameReady { readiness.signal() }
            }
            close(stderrFD)
            stderrClosed.signal()
        }
        reader.start()
        let exited = self.exited
        let waiter = Thread {
            var status: Int32 = 0
            while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
            // WIFEXITED / WEXITSTATUS, written out: the macros are not imported.
            let code = status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
            state.status.withLock { $0 = code }
            exited.signal()
            readiness.signal()
        }
        waiter.start()
    }

    /// `--loop X` when `KEYHOLE_TEST_LOOP` is set: `make test` runs the end-to-end suites on keyholed's
    /// default loop (epoll), then again on SwiftNIO's (`KEYHOLE_TEST_LOOP=nio`).
    package static var loopArguments: [String] {
        guard let loop = ProcessInfo.processInfo.environment["KEYHOLE_TEST_LOOP"], !loop.isEmpty else { return [] }
        return ["--loop", loop]
    }

    /// Whether this run is the second pass of keyholed's end-to-end suites, on another event loop
    /// than the default (`KEYHOLE_TEST_LOOP`). Suites whose keyholed does not take `loopArguments`
    /// (the packaged service under systemd runs its shipped configuration) or that test nothing of
    /// the loop, at a cost, run in the first pass only.
    package static var onAnotherLoop: Bool { !loopArguments.isEmpty }

    /// Starts keyholed and waits until it says it is ready.
    package static func start(config: String = "", arguments: [String] = ["--enable-debug-ops"]) throws -> DaemonProcess {
        let daemon = try DaemonProcess(config: config, arguments: arguments)
        try daemon.waitUntilReady()
        return daemon
    }

    package func waitUntilReady(seconds: Int = 60) throws {
        guard readiness.wait(timeout: .now() + .seconds(seconds)) == .success, state.status.withLock({ $0 == nil }) else {
            kill()
            throw Failure(description: "keyholed did not become ready; stderr:\n\(stderr)")
        }
    }

    /// Waits until keyholed's stderr holds `text` (a log event), as a test's point of synchronisation.
    package func waitForStderr(containing text: String, seconds: Int = 60) throws {
        let signal = DispatchSemaphore(value: 0)
        let present = state.stderr.withLock { stderr in
            if stderr.contains(text) { return true }
            state.watchers.withLock { $0.append((text, signal)) }
            return false
        }
        guard present || signal.wait(timeout: .now() + .seconds(seconds)) == .success else {
            throw Failure(description: "keyholed never logged '\(text)'; stderr:\n\(stderr)")
        }
    }

    /// What keyholed logged so far; complete once `waitForExit` or `terminate` returned.
    package var stderr: String { state.stderr.withLock { $0 } }

    /// Waits for the process to exit and for its stderr to end, and returns its exit status.
    @discardableResult
    package func waitForExit(seconds: Int = 60) throws -> Int32 {
        guard exited.wait(timeout: .now() + .seconds(seconds)) == .success else {
            kill()
            throw Failure(description: "keyholed did not exit; stderr:\n\(stderr)")
        }
        exited.signal()
        guard stderrClosed.wait(timeout: .now() + .seconds(seconds)) == .success else {
            throw Failure(description: "keyholed's stderr stayed open after it exited")
        }
        stderrClosed.signal()
        return state.status.withLock { $0 ?? -1 }
    }

    /// SIGTERM, then the exit status.
    package func terminate() throws -> Int32 {
        signal(SIGTERM)
        return try waitForExit()
    }

    /// Sends `signal` while the child runs (never to a reaped pid that may have been reused).
    package func signal(_ signal: Int32) {
        if state.status.withLock({ $0 == nil }) { Foundation.kill(pid, signal) }
    }

    /// SIGKILL, for cleanup after a failed test.
    package func kill() { signal(SIGKILL) }

    deinit {
        kill()
        if ownsDirectory { try? FileManager.default.removeItem(at: directory) }
    }
}
