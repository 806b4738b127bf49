import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// `--fixed-clock` with `debug.advance_clock` (PROTOCOL.md, "Debug operations"): how the Python and
/// client tests make a state or a session expire without waiting.
@Suite("debug.advance_clock, end to end", .serialized, .ownThreads)
struct TestClockEndToEndTests {
    static let moment: Int64 = 1_800_000_000

    @Test("the clock reads the fixed moment until moved, only forward; what it reads drives expiry")
    func advance() throws {
        let daemon = try DaemonProcess.start(
            config: SessionEndToEndTests.config, arguments: ["--enable-debug-ops", "--fixed-clock", "\(Self.moment)"])
        let connection = try RawConnection(path: daemon.socketPath)
        let created = try connection.result("session.create", ["sub": "alice", "ttl_s": 600])
        let token = try #require(created["session"]?.stringValue)
        #expect(created["expires_at"]?.intValue == Self.moment + 600)

        #expect(try connection.result("debug.advance_clock", ["s": 599]) == ["now": .int(Self.moment + 599)])
        #expect(try connection.result("session.get", ["session": .string(token)])["sub"] == "alice")
        #expect(try connection.result("debug.advance_clock", ["s": 1]) == ["now": .int(Self.moment + 600)])
        #expect(try connection.errorCode("session.get", ["session": .string(token)]) == "session_not_found")
        // Zero reads it; back, or not a whole number of seconds, is refused.
        #expect(try connection.result("debug.advance_clock", ["s": 0]) == ["now": .int(Self.moment + 600)])
        #expect(try connection.errorCode("debug.advance_clock", ["s": -1]) == "bad_request")
        #expect(try connection.errorCode("debug.advance_clock", ["s": 1.5]) == "bad_request")
        #expect(try connection.errorCode("debug.advance_clock", [:]) == "bad_request")
        #expect(try daemon.terminate() == 0)

        // Not past the end of 9999: refused, the clock kept; up to it, keyholed works on.
        let late = try DaemonProcess.start(
            config: SessionEndToEndTests.config, arguments: ["--enable-debug-ops", "--fixed-clock", "253402300000"])
        let lateConnection = try RawConnection(path: late.socketPath)
        #expect(try lateConnection.errorCode("debug.advance_clock", ["s": 800]) == "bad_request")
        #expect(try lateConnection.result("debug.advance_clock", ["s": 0]) == ["now": 253_402_300_000])
        #expect(try lateConnection.result("debug.advance_clock", ["s": 799]) == ["now": 253_402_300_799])
        #expect(try lateConnection.result("session.create", ["sub": "bob", "ttl_s": 600])["expires_at"]?.intValue == 253_402_301_399)
        #expect(try late.terminate() == 0)
    }

    @Test("--fixed-clock must be a moment from 1970 to the end of 9999: anything else is exit 78, not a crash")
    func badMoment() throws {
        for value in ["nan", "inf", "-1", "1e300", "253402300800"] {
            let daemon = try DaemonProcess(arguments: ["--enable-debug-ops", "--fixed-clock=\(value)"])
            #expect(try daemon.waitForExit() == 78, "\(value): \(daemon.stderr)")
            #expect(daemon.stderr.contains("--fixed-clock"), "\(value)")
        }
    }

    @Test("on the real clock there is nothing to move: unknown_op, as for any debug operation without --enable-debug-ops")
    func realClock() throws {
        let daemon = try DaemonProcess.start()
        let connection = try RawConnection(path: daemon.socketPath)
        #expect(try connection.errorCode("debug.advance_clock", ["s": 1]) == "unknown_op")
        #expect(try connection.result("debug.echo", ["a": 1]) == ["a": 1])
        #expect(try daemon.terminate() == 0)
    }
}
