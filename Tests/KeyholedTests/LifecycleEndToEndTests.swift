import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

@Suite("keyholed lifecycle, end to end", .serialized, .ownThreads)
struct LifecycleEndToEndTests {
    @Test("SIGTERM with requests in flight: every request read is answered, then exit 0 and the socket is removed")
    func sigtermDrains() throws {
        let daemon = try DaemonProcess.start()
        let connection = try RawConnection(path: daemon.socketPath)
        for id in 1...5 { try connection.sendFrame(#"{"op":"debug.sleep","id":\#(id),"args":{"ms":700}}"#) }
        // Frames are read in order: once this answer is back, the five sleeps have been read and started.
        try connection.sendFrame(#"{"op":"ping","id":"marker"}"#)
        #expect(try connection.readResponse()["id"] == "marker")
        daemon.signal(SIGTERM)
        var answered = Set<JSONValue>()
        for _ in 1...5 {
            let response = try connection.readResponse()
            #expect(response["ok"] == true)
            #expect(response["result"]?["slept_ms"] == 700)
            answered.insert(response["id"]!)
        }
        #expect(answered == [1, 2, 3, 4, 5])
        #expect(try connection.readsGoodbye(), "the goodbye comes after the last answer")
        #expect(try connection.readsEndOfStream())
        #expect(try daemon.waitForExit() == 0)
        #expect(!FileManager.default.fileExists(atPath: daemon.socketPath))
        #expect(daemon.stderr.contains("server.draining"))
    }

    @Test("SIGTERM while a client has connected but not yet sent: its first request is still answered; a silent one is closed after the grace")
    func sigtermAnswersAFreshConnectionsFirstRequest() throws {
        // A drain timeout far past every wait below: the silent connection must go after the grace,
        // and a keyholed that held it for the drain timeout fails (readsEndOfStream gives up at 15 s).
        let daemon = try DaemonProcess.start(config: "[server]\ndrain_timeout = \"10m\"\n")
        // Accepted (a served round trip on another connection proves the listener has taken both).
        let fresh = try RawConnection(path: daemon.socketPath)
        let silent = try RawConnection(path: daemon.socketPath)
        let used = try RawConnection(path: daemon.socketPath)
        try used.sendFrame(#"{"op":"ping","id":"before"}"#)
        #expect(try used.readResponse()["id"] == "before")
        daemon.signal(SIGTERM)
        try daemon.waitForStderr(containing: "server.draining")
        // A connection that had been used is idle at shutdown: it gets the goodbye and is closed.
        #expect(try used.readsGoodbye())
        #expect(try used.readsEndOfStream())
        try fresh.sendFrame(#"{"op":"ping","id":"late"}"#)
        let answer = try fresh.readResponse()
        #expect(answer["id"] == "late")
        #expect(answer["ok"] == true)
        #expect(try fresh.readsGoodbye())
        #expect(try fresh.readsEndOfStream())
        // The silent one holds shutdown up for the grace (1 s), not the drain timeout.
        #expect(try silent.readsGoodbye())
        #expect(try silent.readsEndOfStream())
        #expect(try daemon.waitForExit(seconds: 120) == 0)
        #expect(!daemon.stderr.contains("connection.drain_timeout"))
    }

    @Test("SIGTERM: a change sent after keyholed stopped reading its connection is not applied, and the goodbye after the last answer says so")
    func goodbyePromisesUnreadRequestsHadNoEffect() throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // One loop: shutdown stops reading every connection in one pass, so the goodbye on one
        // connection shows that the other has stopped being read too.
        let config = "[server]\nthreads = 1\n"
        let daemon = try DaemonProcess(config: config, arguments: ["--enable-debug-ops"], directory: directory)
        try daemon.waitUntilReady()
        let idle = try RawConnection(path: daemon.socketPath)
        let busy = try RawConnection(path: daemon.socketPath)
        try idle.sendFrame(#"{"op":"ping","id":"before"}"#)
        #expect(try idle.readResponse()["id"] == "before")
        // Long enough to outlast the steps below on a loaded machine; shutdown waits for it anyway.
        try busy.sendFrame(#"{"op":"debug.sleep","id":1,"args":{"ms":5000}}"#)
        try busy.sendFrame(#"{"op":"ping","id":"marker"}"#)
        #expect(try busy.readResponse()["id"] == "marker", "the sleep has been read and started")
        daemon.signal(SIGTERM)
        #expect(try idle.readsGoodbye())
        #expect(try idle.readsEndOfStream())
        // A pooled client writing at this moment: keyholed is still answering on this connection,
        // but no longer reads it.
        try busy.sendFrame(#"{"op":"session.create","id":2,"args":{"sub":"unread"}}"#)
        let slept = try busy.readResponse()
        #expect(slept["id"] == 1)
        #expect(slept["ok"] == true)
        #expect(try busy.readsGoodbye(), "after the last answer; none for id 2")
        #expect(try busy.readsEndOfStream())
        #expect(try daemon.waitForExit() == 0)

        // The promise held: the create was never applied, so a client may send it again.
        let again = try DaemonProcess(config: config, arguments: ["--enable-debug-ops"], directory: directory)
        try again.waitUntilReady()
        let check = try RawConnection(path: again.socketPath)
        #expect(try check.result("stats")["store"]?["sessions"]?.intValue == 0)
        #expect(try again.terminate() == 0)
    }

    @Test("a client that pipelines and never reads cannot hold up shutdown past drain_timeout")
    func nonReadingClientDoesNotBlockShutdown() throws {
        let daemon = try DaemonProcess.start(config: "[server]\ndrain_timeout = \"1s\"\n")
        let hog = try RawConnection(path: daemon.socketPath)
        let one = withUnsafeBytes(of: UInt32(14).bigEndian, Array.init) + Array(#"{"op":"stats"}"#.utf8)
        let frame = Array([[UInt8]](repeating: one, count: 20_000).joined())
        let writer = Thread {
            // Blocks once keyholed stops reading; fails once it closes the connection.
            for _ in 0..<50 { guard (try? hog.send(frame)) != nil else { return } }
        }
        writer.start()
        // Wait (by round trips, not time) until keyholed has served a good share of the hog's requests.
        let observer = try RawConnection(path: daemon.socketPath)
        var served: Int64 = 0
        for attempt in 0..<100_000 where served < 1000 {
            try observer.sendFrame(#"{"op":"stats","id":\#(attempt)}"#)
            served = try observer.readResponse()["result"]?["requests"]?["stats"]?.intValue ?? 0
        }
        #expect(served >= 1000)
        // Responses pile up unread: the server must stop cutting frames rather than queue them all.
        try observer.sendFrame(#"{"op":"stats","id":"final"}"#)
        let stats = try observer.readResponse()["result"]!
        // Each was answered as it was read, however many answers sit unsent: none waits for anything.
        #expect(stats["in_flight"]?.intValue == 0)
        daemon.signal(SIGTERM)
        #expect(try daemon.waitForExit(seconds: 20) == 0)
        #expect(daemon.stderr.contains("connection.drain_timeout"))
    }

    @Test("SIGINT stops an idle keyholed with status 0")
    func sigint() throws {
        let daemon = try DaemonProcess.start()
        daemon.signal(SIGINT)
        #expect(try daemon.waitForExit() == 0)
    }

    @Test("a socket file left by a dead process is replaced")
    func staleSocket() throws {
        let directory = try DaemonProcess.makeDirectory()
        let path = directory.appendingPathComponent("k.sock").path
        // Bind a socket and close it without unlinking: what a killed process leaves behind.
        close(try UnixSocket.bound(to: path))
        #expect(FileManager.default.fileExists(atPath: path))

        let daemon = try DaemonProcess(arguments: [], directory: directory)
        try daemon.waitUntilReady()
        let connection = try RawConnection(path: path)
        try connection.sendFrame(#"{"op":"ping","id":1}"#)
        #expect(try connection.readResponse()["ok"] == true)
        #expect(try daemon.terminate() == 0)
        #expect(daemon.stderr.contains("server.stale_socket_removed"))
    }

    @Test("a file at the socket path that is not a socket is never deleted: keyholed refuses to start")
    func notASocket() throws {
        let directory = try DaemonProcess.makeDirectory()
        let path = directory.appendingPathComponent("k.sock")
        try "precious".write(to: path, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(arguments: [], directory: directory)
        #expect(try daemon.waitForExit() == 1)
        #expect(daemon.stderr.contains("not a socket"))
        #expect(try String(contentsOf: path, encoding: .utf8) == "precious")
    }

    @Test("a second keyholed on the same socket refuses to start; the first keeps serving")
    func secondInstance() throws {
        let first = try DaemonProcess.start()
        let rival = try DaemonProcess(socketPath: first.socketPath)
        #expect(try rival.waitForExit() == 1)
        #expect(rival.stderr.contains("already running"))
        let connection = try RawConnection(path: first.socketPath)
        try connection.sendFrame(#"{"op":"ping","id":1}"#)
        #expect(try connection.readResponse()["ok"] == true)
        #expect(try first.terminate() == 0)
    }

    @Test("the socket file gets the configured mode", arguments: [("", 0o660), ("[server]\nsocket_mode = \"0600\"\n", 0o600)])
    func socketMode(config: String, mode: Int) throws {
        let daemon = try DaemonProcess.start(config: config)
        let attributes = try FileManager.default.attributesOfItem(atPath: daemon.socketPath)
        #expect((attributes[.posixPermissions] as? Int) == mode)
        #expect(try daemon.terminate() == 0)
    }
}
