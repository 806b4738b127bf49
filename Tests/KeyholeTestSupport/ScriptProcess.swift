import Foundation
import KeyholeProtocol
import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// A Python script of the repository (Protocol/testing, Scripts) as a child process (spawned by ChildProcess): its stdout as
/// lines, its stdin to write commands to, its stderr kept for the failure message.
package final class ScriptProcess: Sendable {
    package let pid: pid_t
    /// The write end of the child's stdin until `closeInput`: a send after it, or a second close,
    /// must not reach a descriptor number another thread of the test process has been given since.
    private let input: Mutex<Int32?>
    /// stdout, line by line, until end of file.
    package let lines: AsyncStream<String>
    private let errorText = ChildProcess.LockedText()

    /// The repository's root, from this file's path.
    package static let repositoryRoot = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// Starts `python3 Protocol/testing/<script> arguments...`.
    package static func python(_ script: String, _ arguments: [String], environment: [String: String] = [:], stdin: Bool = false) throws -> ScriptProcess {
        try python(path: "Protocol/testing/\(script)", arguments, environment: environment, stdin: stdin)
    }

    /// Starts `python3 <path> arguments...`, the path relative to the repository's root.
    package static func python(path: String, _ arguments: [String], environment: [String: String] = [:], stdin: Bool = false) throws -> ScriptProcess {
        let script = repositoryRoot.appendingPathComponent(path).path
        return try ScriptProcess(["/usr/bin/python3", "-u", script] + arguments, environment: environment, stdin: stdin)
    }

    package init(_ argv: [String], environment: [String: String], stdin: Bool) throws {
        let (pid, inWrite, outRead, errRead) = try ChildProcess.spawnPiped(argv, environment: environment, stdin: stdin)
        self.pid = pid
        self.input = Mutex(inWrite)
        let (lines, continuation) = AsyncStream.makeStream(of: String.self)
        self.lines = lines
        Thread {
            var pending: [UInt8] = []
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = chunk.withUnsafeMutableBytes { read(outRead, $0.baseAddress, $0.count) }
                if count < 0 && errno == EINTR { continue }
                guard count > 0 else { break }
                pending += chunk[..<count]
                while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                    continuation.yield(String(decoding: pending[..<newline], as: UTF8.self))
                    pending.removeSubrange(...newline)
                }
            }
            close(outRead)
            continuation.finish()
        }.start()
        let errorText = self.errorText
        Thread {  // drained as it comes, so that the child never blocks on a full pipe
            errorText.set(ChildProcess.readAll(errRead))
            errorText.done.signal()
        }.start()
    }

    /// The child's stdout lines as JSON (a line that is not JSON as a string), for scripts that
    /// answer commands with one JSON line each. Consume it from one place.
    package func jsonReplies() -> AsyncStream<JSONValue> {
        let (replies, continuation) = AsyncStream.makeStream(of: JSONValue.self)
        let lines = self.lines
        Task {
            for await line in lines {
                continuation.yield((try? JSONValue.parse(ByteBuffer(string: line))) ?? .string(line))
            }
            continuation.finish()
        }
        return replies
    }

    /// Writes one line to the child's stdin.
    package func send(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        input.withLock { input in
            guard let input else { return }
            _ = bytes.withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
        }
    }

    deinit {
        // A test that failed before `closeInput`: its descriptor is not left open.
        closeInput()
    }

    /// Closes the child's stdin (end of input).
    package func closeInput() {
        input.withLock { input in
            if let fd = input { close(fd) }
            input = nil
        }
    }

    /// Waits (off the cooperative pool) for the child to exit: its exit status and everything it
    /// wrote on stderr.
    package func wait() async -> (status: Int32, stderr: String) {
        let pid = self.pid
        let status: Int32 = await withCheckedContinuation { continuation in
            Thread { continuation.resume(returning: ChildProcess.waitForExit(pid)) }.start()
        }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = errorText.done
            Thread {
                done.wait()
                continuation.resume()
            }.start()
        }
        return (status, errorText.value)
    }

    /// Ends the child at once (a test that failed half-way); `wait` still reaps it.
    package func kill() {
        _ = Glibc.kill(pid, SIGKILL)
    }
}
