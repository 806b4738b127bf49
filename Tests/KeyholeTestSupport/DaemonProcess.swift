import Foundation
import Synchronization

/// keyholed started as a child process on a temporary socket, as an operator would run it.
package final class DaemonProcess: Sendable {
    package let directory: URL
    package let socketPath: String
    private let process: Process
    private let state = StateBox()
    private let readiness = DispatchSemaphore(value: 0)
    private let exited = DispatchSemaphore(value: 0)

    private final class StateBox: Sendable {
        let stderr = Mutex("")
    }

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
    }

    /// The binary under test: `$KEYHOLED`, else `keyholed` beside the test bundle (both live in .build/debug).
    package static var binary: URL {
        if let path = ProcessInfo.processInfo.environment["KEYHOLED"] { return URL(fileURLWithPath: path) }
        let testBinary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var directory = testBinary.deletingLastPathComponent()
        while directory.path != "/" {
            let candidate = directory.appendingPathComponent("keyholed")
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            directory.deleteLastPathComponent()
        }
        return URL(fileURLWithPath: ".build/debug/keyholed")
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
    package init(config: String = "", arguments: [String] = [], directory: URL? = nil, socketName: String = "k.sock") throws {
        self.directory = try directory ?? Self.makeDirectory()
        socketPath = self.directory.appendingPathComponent(socketName).path
        let configPath = self.directory.appendingPathComponent("keyholed.toml")
        try config.write(to: configPath, atomically: true, encoding: .utf8)
        process = Process()
        process.executableURL = Self.binary
        process.arguments = [
            "--config", configPath.path, "--socket", socketPath,
            "--state-dir", self.directory.appendingPathComponent("state").path, "--log-level", "debug",
        ] + arguments
        let pipe = Pipe()
        process.standardError = pipe
        process.standardOutput = FileHandle.nullDevice
        let state = self.state
        let readiness = self.readiness
        pipe.fileHandleForReading.readabilityHandler = { handle in
            let data = handle.availableData
            guard !data.isEmpty else {
                handle.readabilityHandler = nil
                return
            }
            let text = String(decoding: data, as: UTF8.self)
            let becameReady = state.stderr.withLock { stderr in
                let before = stderr.contains("keyholed.ready")
                stderr += text
                return !before && stderr.contains("keyholed.ready")
            }
            if becameReady { readiness.signal() }
        }
        let exited = self.exited
        process.terminationHandler = { _ in
            exited.signal()
            readiness.signal()
        }
        try process.run()
    }

    /// Starts keyholed and waits until it says it is ready.
    package static func start(config: String = "", arguments: [String] = ["--enable-debug-ops"]) throws -> DaemonProcess {
        let daemon = try DaemonProcess(config: config, arguments: arguments)
        try daemon.waitUntilReady()
        return daemon
    }

    package func waitUntilReady(seconds: Int = 60) throws {
        guard readiness.wait(timeout: .now() + .seconds(seconds)) == .success, process.isRunning else {
            kill()
            throw Failure(description: "keyholed did not become ready; stderr:\n\(stderr)")
        }
    }

    package var stderr: String { state.stderr.withLock { $0 } }
    package var pid: Int32 { process.processIdentifier }

    /// Waits for the process to exit and returns its status.
    @discardableResult
    package func waitForExit(seconds: Int = 60) throws -> Int32 {
        guard exited.wait(timeout: .now() + .seconds(seconds)) == .success else {
            kill()
            throw Failure(description: "keyholed did not exit; stderr:\n\(stderr)")
        }
        exited.signal()
        process.waitUntilExit()
        // The pipe may still hold the last lines.
        return process.terminationStatus
    }

    /// SIGTERM, then the exit status.
    package func terminate() throws -> Int32 {
        if process.isRunning { Foundation.kill(pid, SIGTERM) }
        return try waitForExit()
    }

    /// SIGKILL, for cleanup after a failed test.
    package func kill() {
        if process.isRunning { Foundation.kill(pid, SIGKILL) }
    }

    deinit {
        if process.isRunning { Foundation.kill(process.processIdentifier, SIGKILL) }
        try? FileManager.default.removeItem(at: directory)
    }
}
