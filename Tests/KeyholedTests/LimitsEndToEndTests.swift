import KeyholeProtocol
import KeyholeTestSupport
import Testing

@Suite("keyholed connection limits, end to end", .serialized, .ownThreads)
struct LimitsEndToEndTests {
    @Test("a frame left incomplete past frame_timeout closes the connection (slowloris)", arguments: [
        [0x00, 0x00] as [UInt8],
        [0x00, 0x00, 0x00, 0x14] + Array(#"{"op":"#.utf8),
    ])
    func slowloris(prefix: [UInt8]) throws {
        let daemon = try DaemonProcess.start(config: "[server]\nframe_timeout = \"300ms\"\nidle_timeout = \"1h\"\n")
        let connection = try RawConnection(path: daemon.socketPath)
        try connection.send(prefix)
        // The receive blocks until keyholed closes; RawConnection's 15 s receive timeout fails the test otherwise.
        #expect(try connection.readsEndOfStream())
        #expect(try daemon.terminate() == 0)
        #expect(daemon.stderr.contains("connection.frame_timeout"))
    }

    @Test("a connection idle past idle_timeout is closed, and the log says that was why")
    func idle() throws {
        let daemon = try DaemonProcess.start(config: "[server]\nidle_timeout = \"300ms\"\n")
        let connection = try RawConnection(path: daemon.socketPath)
        try connection.sendFrame(#"{"op":"ping","id":1}"#)
        #expect(try connection.readResponse()["ok"] == true)
        #expect(try connection.readsEndOfStream())
        #expect(try daemon.terminate() == 0)
        // Closed for being idle, not for anything else (debug level, which the tests' keyholed logs).
        #expect(daemon.stderr.contains(" debug connection.idle_timeout "), "\(daemon.stderr)")
        #expect(!daemon.stderr.contains("connection.frame_timeout"))
    }

    @Test("a connection waiting for a slow answer is not idle")
    func notIdleWhileInFlight() throws {
        let daemon = try DaemonProcess.start(config: "[server]\nidle_timeout = \"200ms\"\n")
        let connection = try RawConnection(path: daemon.socketPath)
        try connection.sendFrame(#"{"op":"debug.sleep","id":1,"args":{"ms":1000}}"#)
        #expect(try connection.readResponse()["result"]?["slept_ms"] == 1000)
        #expect(try daemon.terminate() == 0)
        #expect(!daemon.stderr.contains("connection.idle_timeout"))
    }
}
