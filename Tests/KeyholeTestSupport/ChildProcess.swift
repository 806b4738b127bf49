import Foundation

/// Starting the project's binaries as child processes, for tests.
///
/// posix_spawn with close-on-exec pipes created under one lock: Foundation's Process can leave a pipe's
/// write end open in the parent when several children start at once, so a reader never saw end of file.
package enum ChildProcess {
    private static let spawnLock = NSLock()

    /// Runs `body` while no child is being spawned by this process. A child shares every open file
    /// description of the test process from fork until exec closes the close-on-exec ones, so for that
    /// moment it holds their flocks too: a test that releases a state directory's lock and takes it
    /// again at once could find it held by another test's child. posix_spawn returns once the child
    /// has its new program, and the kernel closes the close-on-exec descriptors just after that: under
    /// the spawn lock no child is between fork and exec, but one may still be finishing its exec.
    package static func withoutSpawning<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        spawnLock.lock()
        defer { spawnLock.unlock() }
        return try body()
    }

    /// A product of this package, found beside the test bundle (both live in .build/<configuration>).
    package static func builtProduct(_ name: String) -> URL {
        let testBinary = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath()
        var directory = testBinary.deletingLastPathComponent()
        while directory.path != "/" {
            let candidate = directory.appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate.path) { return candidate }
            directory.deleteLastPathComponent()
        }
        return URL(fileURLWithPath: ".build/debug/\(name)")
    }

    private typealias AddCloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32

    /// glibc's posix_spawn_file_actions_addclosefrom_np, looked up once.
    private static let addCloseFrom: AddCloseFrom = {
        guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") else {
            fatalError("glibc 2.34 or later is needed (posix_spawn_file_actions_addclosefrom_np)")
        }
        return unsafeBitCast(symbol, to: AddCloseFrom.self)
    }()

    /// Spawns `argv` with stdin from /dev/null; returns its pid and the read ends of its stdout (when
    /// captured; else /dev/null) and stderr.
    /// - Parameter passing: a descriptor of the test's (close-on-exec, above 3) the child gets as fd 3,
    ///   as systemd passes a listening socket.
    package static func spawn(_ argv: [String], environment: [String: String] = [:], captureStdout: Bool, passing: Int32? = nil)
        throws -> (pid: pid_t, stdout: Int32?, stderr: Int32)
    {
        let spawned = try spawn(argv, environment: environment, stdin: false, captureStdout: captureStdout, passing: passing)
        return (spawned.pid, spawned.stdout, spawned.stderr)
    }

    /// As `spawn`, with stdout captured and, when `stdin` is true, a pipe to the child's stdin: returns
    /// its write end too (a script the test talks to, such as Protocol/testing/keyholed_harness.py).
    package static func spawnPiped(_ argv: [String], environment: [String: String] = [:], stdin: Bool)
        throws -> (pid: pid_t, stdin: Int32?, stdout: Int32, stderr: Int32)
    {
        let spawned = try spawn(argv, environment: environment, stdin: stdin, captureStdout: true, passing: nil)
        return (spawned.pid, spawned.stdin, spawned.stdout!, spawned.stderr)
    }

    private static func spawn(_ argv: [String], environment: [String: String], stdin: Bool, captureStdout: Bool, passing: Int32?)
        throws -> (pid: pid_t, stdin: Int32?, stdout: Int32?, stderr: Int32)
    {
        spawnLock.lock()
        defer { spawnLock.unlock() }
        func makePipe() throws -> [Int32] {
            var fds: [Int32] = [-1, -1]
            guard pipe(&fds) == 0 else { throw RawConnection.Failure(description: "pipe: \(errno)") }
            for fd in fds { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
            return fds
        }
        let errPipe = try makePipe()
        let outPipe = captureStdout ? try makePipe() : nil
        let inPipe = stdin ? try makePipe() : nil
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        if let inPipe {
            posix_spawn_file_actions_adddup2(&actions, inPipe[0], 0)
        } else {
            posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        }
        if let outPipe {
            posix_spawn_file_actions_adddup2(&actions, outPipe[1], 1)
        } else {
            posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        }
        // dup2 clears close-on-exec on the child's copy only.
        posix_spawn_file_actions_adddup2(&actions, errPipe[1], 2)
        if let passing {
            precondition(passing > 3, "dup2 onto itself would keep close-on-exec")
            posix_spawn_file_actions_adddup2(&actions, passing, 3)
        }
        // Nothing else of this process's reaches the child. SwiftNIO accepts connections without
        // close-on-exec (accept4 with no SOCK_CLOEXEC), so an in-process test server's connection could
        // be inherited by a child another test spawns at that moment: closing it then does not end the
        // connection until that child exits (a slow-reader test waited 15 s for an end that never came).
        // (glibc 2.34 has the action; Swift's Glibc module does not declare it.)
        guard Self.addCloseFrom(&actions, passing == nil ? 3 : 4) == 0 else {
            throw RawConnection.Failure(description: "posix_spawn_file_actions_addclosefrom_np: \(errno)")
        }
        var env = ProcessInfo.processInfo.environment
        env.merge(environment) { _, new in new }
        let cArguments = argv.map { strdup($0) } + [nil]
        let cEnvironment = env.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer {
            cArguments.forEach { free($0) }
            cEnvironment.forEach { free($0) }
        }
        var pid: pid_t = 0
        let result = posix_spawn(&pid, argv[0], &actions, nil, cArguments, cEnvironment)
        close(errPipe[1])
        if let outPipe { close(outPipe[1]) }
        if let inPipe { close(inPipe[0]) }
        guard result == 0 else {
            close(errPipe[0])
            if let outPipe { close(outPipe[0]) }
            if let inPipe { close(inPipe[1]) }
            throw RawConnection.Failure(description: "posix_spawn \(argv[0]): \(String(cString: strerror(result)))")
        }
        return (pid, inPipe?[1], outPipe?[0], errPipe[0])
    }

    /// What a finished command printed and its exit status.
    package struct Result: Sendable {
        package var status: Int32
        package var stdout: String
        package var stderr: String
    }

    /// Runs a short-lived command to completion (the `keyhole` CLI), reading both pipes to end of file.
    package static func run(_ argv: [String], environment: [String: String] = [:]) throws -> Result {
        let (pid, stdout, stderr) = try spawn(argv, environment: environment, captureStdout: true)
        // Read stderr on another thread so neither pipe can fill and stall the child.
        let errText = LockedText()
        let reader = Thread {
            errText.set(readAll(stderr))
            errText.done.signal()
        }
        reader.start()
        let outText = readAll(stdout!)
        errText.done.wait()
        return Result(status: waitForExit(pid), stdout: outText, stderr: errText.value)
    }

    /// Waits for the child `pid` to exit; its exit status, or 128 plus the signal that ended it.
    package static func waitForExit(_ pid: pid_t) -> Int32 {
        var status: Int32 = 0
        while waitpid(pid, &status, 0) < 0 && errno == EINTR {}
        return status & 0x7F == 0 ? (status >> 8) & 0xFF : 128 + (status & 0x7F)
    }

    /// `run` on a thread of its own, for async tests that wait on long commands (package builds, a
    /// chroot): waiting in `run` itself holds one of the cooperative threads every async test of the
    /// process shares (two on a 2-core machine), and timing tests elsewhere then resume seconds late.
    package static func runOffPool(_ argv: [String], environment: [String: String] = [:]) async throws -> Result {
        try await withCheckedThrowingContinuation { continuation in
            Thread { continuation.resume(with: Swift.Result { try run(argv, environment: environment) }) }.start()
        }
    }

    /// Everything `fd` gives until end of file, as text; closes it.
    package static func readAll(_ fd: Int32) -> String {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk[..<count]
        }
        close(fd)
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Text one thread sets once, and another reads once `done` is signalled.
    package final class LockedText: @unchecked Sendable {
        private let lock = NSLock()
        private var text = ""
        package let done = DispatchSemaphore(value: 0)
        package init() {}
        package func set(_ value: String) { lock.withLock { text = value } }
        package var value: String { lock.withLock { text } }
    }
}
