import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// session.get reads its token as bytes where they lie in the frame, or unescaped when the client
/// escaped them; either way the token names the same session.
@Suite("session.get's token read in place, escaped or not", .serialized, .ownThreads)
struct EscapedArgumentsEndToEndTests {
    @Test("an escaped token, an escaped argument name, and a near-token all answer as before")
    func escapedToken() throws {
        let daemon = try DaemonProcess.start()
        let connection = try RawConnection(path: daemon.socketPath)
        try connection.sendFrame(#"{"id":0,"op":"session.create","args":{"sub":"escaped"}}"#)
        let token = try #require(try connection.readResponse()["result"]?["session"]?.stringValue)
        let escaped = "\\u006b" + token.dropFirst()  // "k" as \u006b
        try connection.sendFrame(#"{"id":1,"op":"session.get","args":{"session":"\#(escaped)"}}"#)
        let first = try connection.readResponse()
        #expect(first["result"]?["sub"] == "escaped", "\(first)")
        try connection.sendFrame(#"{"id":2,"op":"session.get","args":{"sess\u0069on":"\#(token)"}}"#)
        let second = try connection.readResponse()
        #expect(second["result"]?["sub"] == "escaped", "\(second)")
        // One byte short of a token, and a token with one more byte: not found, never a crash.
        try connection.sendFrame(#"{"id":3,"op":"session.get","args":{"session":"\#(token.dropLast())"}}"#)
        #expect(try connection.readResponse()["error"]?["code"] == "session_not_found")
        try connection.sendFrame(#"{"id":4,"op":"session.get","args":{"session":"\#(token)A"}}"#)
        #expect(try connection.readResponse()["error"]?["code"] == "session_not_found")
        #expect(try daemon.terminate() == 0)
    }
}
