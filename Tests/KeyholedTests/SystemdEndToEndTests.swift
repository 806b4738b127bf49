import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// keyholed under systemd's protocols, with the test in systemd's place: sd_notify's socket, the
/// watchdog, socket activation (systemd-socket-activate).
@Suite("systemd, end to end", .serialized, .ownThreads)
struct SystemdEndToEndTests {
    @Test("NOTIFY_SOCKET: READY=1 with a status once serving, STATUS as it changes, WATCHDOG=1 within every WATCHDOG_USEC, STOPPING=1 on SIGTERM")
    func notify() throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let notify = try DatagramSocket(path: directory.appendingPathComponent("notify").path)
        // 4 s: keyholed pings at half of it, so a ping may come up to 2 s late (a loaded machine)
        // before systemd would count the watchdog as missed; that, and only that, is what is checked.
        let daemon = try DaemonProcess(
            config: "", directory: directory, environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "4000000"])
        let untilReady = try #require(notify.receive(until: "READY=1"))
        try daemon.waitUntilReady()
        // READY=1 only once the socket is served: the log said so first, and the socket answers.
        let ready = try #require(untilReady.last)
        #expect(ready.contains("STATUS=serving: 0 sessions, 0 users, 0 issuers"))
        #expect(!untilReady.contains { $0.contains("STOPPING") })
        let connection = try RawConnection(path: daemon.socketPath)
        #expect(try connection.result("ping", [:])["protocol"] == 1)
        _ = try connection.result("session.create", ["sub": "u1"])

        // Pings among the status lines: systemd needs one within every WATCHDOG_USEC.
        var pings: [ContinuousClock.Instant] = []
        var statuses: [String] = []
        while pings.count < 4 || statuses.isEmpty {
            let message = try #require(notify.receive(seconds: 30))
            if message.text == "WATCHDOG=1" { pings.append(message.at) } else { statuses.append(message.text) }
        }
        #expect(statuses.contains("STATUS=serving: 1 sessions, 1 users, 0 issuers"))
        for (earlier, later) in zip(pings, pings.dropFirst()) {
            #expect(later - earlier < .microseconds(4_000_000), "a gap of \(later - earlier) between watchdog pings")
        }
        #expect(daemon.stderr.contains("watchdog.started interval_ms=4000"))

        daemon.signal(SIGTERM)
        let untilStopping = try #require(notify.receive(until: "STOPPING=1"))
        #expect(untilStopping.last?.contains("STATUS=stopping") == true)
        #expect(try daemon.waitForExit() == 0)
    }

    @Test("the notify socket dates a message by its arrival (the kernel's stamp), not by when the test read it")
    func arrivalStamps() throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let notify = try DatagramSocket(path: directory.appendingPathComponent("notify").path)
        let sender = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        #expect(sender >= 0)
        defer { close(sender) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: notify.path.utf8) }
        let sent = ContinuousClock.now
        let count = withUnsafePointer(to: &address) { address in
            address.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                sendto(sender, "WATCHDOG=1", 10, 0, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        #expect(count == 10)
        // Read half a second late: the delay being measured, not a wait for something to happen.
        usleep(500_000)
        let message = try #require(notify.receive(seconds: 5))
        #expect(message.text == "WATCHDOG=1")
        #expect(message.at - sent < .milliseconds(400), "dated \(message.at - sent) after it was sent")
        #expect(ContinuousClock.now - message.at >= .milliseconds(450))
    }

    @Test("a wedged event loop withholds the watchdog's ping until it answers again")
    func watchdogWithheld() throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let notify = try DatagramSocket(path: directory.appendingPathComponent("notify").path)
        let daemon = try DaemonProcess(
            config: "[server]\nthreads = 1\n", arguments: ["--enable-debug-ops"], directory: directory,
            environment: ["NOTIFY_SOCKET": notify.path, "WATCHDOG_USEC": "400000"])
        _ = try #require(notify.receive(until: "READY=1"))
        try daemon.waitUntilReady()
        let connection = try RawConnection(path: daemon.socketPath)
        // The only event loop is held for 1.5 s: no ping may come while it is.
        try connection.sendFrame(#"{"id":1,"op":"debug.block","args":{"ms":1500}}"#)
        try daemon.waitForStderr(containing: "watchdog.withheld")
        #expect(daemon.stderr.contains("1 of 1 event loops did not answer"))
        #expect(try connection.readResponse()["result"]?["blocked_ms"] == 1500)
        try daemon.waitForStderr(containing: "watchdog.resumed")
        #expect(try daemon.terminate() == 0)
    }

    @Test("socket activation: systemd-socket-activate's first connection starts keyholed, which answers it and leaves the socket file alone")
    func socketActivation() throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let socket = directory.appendingPathComponent("activated.sock").path
        let daemon = try DaemonProcess(
            config: "", directory: directory, socketPath: directory.appendingPathComponent("configured.sock").path,
            // systemd-socket-activate passes on only the environment it is told to (a sanitizer's options).
            launcher: ["/usr/bin/systemd-socket-activate", "--listen=\(socket)", "--fdname=keyhole"]
                + ["ASAN_OPTIONS", "TSAN_OPTIONS"].filter { ProcessInfo.processInfo.environment[$0] != nil }.map { "--setenv=\($0)" })
        try daemon.waitForStderr(containing: "Listening on")
        #expect(!daemon.stderr.contains("keyholed.ready"))
        // This connection waits in the backlog while keyholed starts, then is answered.
        let connection = try RawConnection(path: socket)
        #expect(try connection.result("ping", [:])["protocol"] == 1)
        try daemon.waitUntilReady()
        #expect(daemon.stderr.contains("systemd.socket_adopted ignored=\(daemon.socketPath) socket=\"fd:3 (keyhole)\""))
        #expect(!FileManager.default.fileExists(atPath: daemon.socketPath))
        #expect(try daemon.terminate() == 0)
        // systemd made the socket file: keyholed does not remove it.
        #expect(FileManager.default.fileExists(atPath: socket))
    }

    @Test("stderr is the journal (JOURNAL_STREAM): each event is one entry with MESSAGE, PRIORITY, KEYHOLE_EVENT and a field per key; nothing on stderr")
    func journal() throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let journalDirectory = directory.appendingPathComponent("journal")
        try FileManager.default.createDirectory(at: journalDirectory, withIntermediateDirectories: false)
        let journal = try DatagramSocket(path: journalDirectory.appendingPathComponent("socket").path)
        // libsystemd writes to /run/systemd/journal/socket: in a mount namespace of its own, keyholed
        // finds this test's socket there; JOURNAL_STREAM names its stderr, as systemd sets it.
        let script = """
            mount -t tmpfs none /run && mkdir -p /run/systemd/journal && mount --bind \(journalDirectory.path) /run/systemd/journal \
              && export JOURNAL_STREAM=$(stat -L -c %d:%i /proc/$$/fd/2) && exec "$@"
            """
        let daemon = try DaemonProcess(
            config: "", arguments: ["--enable-debug-ops"], directory: directory,
            launcher: ["/usr/bin/unshare", "--mount", "--propagation", "private", "/bin/sh", "-c", script, "sh"])
        let entries = try #require(journal.receive(until: "KEYHOLE_EVENT=keyholed.ready\n"), "stderr: \(daemon.stderr)")
        let ready = Self.fields(try #require(entries.last))
        #expect(ready["PRIORITY"] == "6")
        #expect(ready["SYSLOG_IDENTIFIER"] == "keyholed")
        #expect(ready["KEYHOLE_SOCKET"] == daemon.socketPath)
        #expect(ready["KEYHOLE_PID"].flatMap { Int32($0) } != nil)
        #expect(ready["MESSAGE"]?.hasPrefix("keyholed.ready pid=") == true)
        #expect(ready["CODE_FILE"]?.hasSuffix(".swift") == true)
        #expect(entries.contains { Self.fields($0)["KEYHOLE_EVENT"] == "storage.opened" })

        let connection = try RawConnection(path: daemon.socketPath)
        #expect(try connection.result("ping", [:])["protocol"] == 1)
        #expect(try daemon.terminate() == 0)
        let stopped = try #require(journal.receive(until: "KEYHOLE_EVENT=keyholed.stopped\n"))
        #expect(Self.fields(try #require(stopped.last))["PRIORITY"] == "6")
        // Every line went to the journal instead.
        #expect(!daemon.stderr.contains("keyholed.ready") && !daemon.stderr.contains("keyholed.stopped"), "\(daemon.stderr)")
    }

    /// A journal datagram's `FIELD=value` lines (the values here hold no newline).
    static func fields(_ entry: String) -> [String: String] {
        var fields: [String: String] = [:]
        for line in entry.split(separator: "\n") {
            guard let equals = line.firstIndex(of: "=") else { continue }
            fields[String(line[..<equals])] = String(line[line.index(after: equals)...])
        }
        return fields
    }
}
