import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// An answer that sees a change not yet durable waits for it: while A's revoke of a session is being
/// synced, B's session.get of it and B's own revoke of it are not answered (a ping sent after them
/// is); when that sync fails, they are answered storage_unavailable and the session is live.
@Suite("Answers that see changes not yet durable, end to end", .ownThreads)
struct ObservedDurabilityEndToEndTests {
    typealias Harness = CommitSyncEndToEndTests

    /// On the committer thread only: a sync held on an event loop (commits inline) would also hold B's
    /// requests whenever B's connection shares that loop, and this test could not tell waiting from
    /// being stuck (the store's own suite covers both commit paths' marks).
    @Test("held: B's read and revoke wait behind A's revoke; failed: all three storage_unavailable, the session live",
        .timeLimit(.minutes(1)))
    func readsWaitForTheSync() async throws {
        let committedBy = "committer thread"
        // Short enough for the socket's path (DaemonProcess.makeDirectory).
        let directory = try DaemonProcess.makeDirectory().path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        try await Harness.serve(directory, committedBy: committedBy, now: 1_780_000_000) { socket, held in
            let a = try RawConnection(path: socket)
            let b = try RawConnection(path: socket)
            let created = try a.result("session.create", ["sub": "seen"])
            let token = try #require(created["session"]?.stringValue)

            held.arm()
            try a.sendFrame(#"{"op":"session.revoke","id":3,"args":{"session":"\#(token)"}}"#)
            held.waitUntilEntered()
            // B's answers would come before its ping, in order, were they answered at once.
            try b.sendFrame(#"{"op":"session.get","id":4,"args":{"session":"\#(token)"}}"#)
            try b.sendFrame(#"{"op":"session.revoke","id":5,"args":{"session":"\#(token)"}}"#)
            try b.sendFrame(#"{"op":"ping","id":6}"#)
            #expect(try b.readResponse()["id"] == 6)

            held.release(succeeding: false)
            #expect(try a.readResponse()["error"]?["code"] == "storage_unavailable")
            var answers: [JSONValue] = []
            for _ in 0..<2 { answers.append(try b.readResponse()) }
            #expect(Set(answers.compactMap { $0["id"]?.intValue }) == [4, 5])
            for answer in answers {
                #expect(answer["error"]?["code"] == "storage_unavailable", "\(answer.jsonText)")
            }
            // The revoke was taken back: the session is live (once storage is back, reads go on anyway).
            #expect(try b.result("session.get", ["session": .string(token)])["sub"] == "seen")
        }
    }
}
