import Foundation
import KeyholeTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

@Suite("Clients that leave with answers unsent, end to end", .ownThreads)
struct UnreadAnswersEndToEndTests {
    /// Pipelines as many big `debug.echo` requests as the socket takes without blocking.
    static func pipelineBigEchoes(_ connection: RawConnection) {
        let payload = String(repeating: "x", count: 60_000)
        let body = Array(#"{"op":"debug.echo","id":1,"args":{"p":"\#(payload)"}}"#.utf8)
        let length = UInt32(body.count)
        let frame = [UInt8(length >> 24), UInt8(length >> 16 & 0xFF), UInt8(length >> 8 & 0xFF), UInt8(length & 0xFF)] + body
        for _ in 0..<40 {
            let sent = frame.withUnsafeBytes { send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_DONTWAIT)) }
            guard sent == frame.count else { break }
        }
    }

    @Test("answers still being sent when the client closes: keyholed drops them and stays up (no SIGPIPE)")
    func closedWithAnswersUnsent() throws {
        let daemon = try DaemonProcess.start()
        for _ in 0..<10 {
            let connection = try RawConnection(path: daemon.socketPath)
            Self.pipelineBigEchoes(connection)
            // More than a megabyte of answers: the socket's buffers fill and keyholed waits to send the
            // rest. One answer read shows it is sending; then the client leaves.
            #expect(try connection.readFrame() != nil)
        }
        let connection = try RawConnection(path: daemon.socketPath)
        try connection.sendFrame(#"{"op":"ping","id":7}"#)
        #expect(try connection.readResponse()["ok"] == true)
        #expect(try daemon.terminate() == 0)
    }
}
