import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

@Suite("Out of file descriptors, end to end", .ownThreads)
struct DescriptorLimitEndToEndTests {
    static func ping(_ connection: RawConnection) throws -> Bool {
        try connection.sendFrame(#"{"op":"ping","id":1}"#)
        return try connection.readResponse()["ok"] == true
    }

    @Test("keyholed out of descriptors pauses accepting, says so, keeps serving, and accepts again once some are free")
    func outOfDescriptors() throws {
        // 64 descriptors: keyholed needs about 20 of its own, so a few dozen clients exhaust the rest.
        let daemon = try DaemonProcess(arguments: [], launcher: ["/usr/bin/prlimit", "--nofile=64:64", "--"])
        try daemon.waitUntilReady()
        let first = try RawConnection(path: daemon.socketPath)
        #expect(try Self.ping(first))
        // Connections beyond what keyholed can accept wait in the socket's backlog.
        var waiting = try (0..<100).map { _ in try RawConnection(path: daemon.socketPath) }
        if DaemonProcess.loopArguments != ["--loop", "nio"] {
            // keyholed's own loop logs it (rate-limited) and looks away for a moment instead of spinning.
            try daemon.waitForStderr(containing: "server.accept_failed")
            #expect(daemon.stderr.contains("Too many open files"))
        }
        #expect(try Self.ping(first), "connections already accepted are served meanwhile")
        waiting.removeAll()
        let later = try RawConnection(path: daemon.socketPath)
        #expect(try Self.ping(later), "accepting resumes once descriptors are free")
        #expect(try daemon.terminate() == 0)
    }
}
