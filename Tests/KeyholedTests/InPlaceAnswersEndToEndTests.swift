import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// ping and session.get write their results straight into the connection's batch of answers
/// (`Operation.writing`); these drive them among other answers in one batch, as a pipelining client does.
@Suite("answers written in place, end to end", .serialized, .ownThreads)
struct InPlaceAnswersEndToEndTests {
    static func frame(_ text: String) -> [UInt8] {
        let body = Array(text.utf8)
        return withUnsafeBytes(of: UInt32(body.count).bigEndian, Array.init) + body
    }

    @Test("in one batch with refusals between them: every answer whole, in order, nothing of a refused one left behind")
    func mixedBatch() throws {
        let daemon = try DaemonProcess.start()
        let connection = try RawConnection(path: daemon.socketPath)
        try connection.sendFrame(#"{"id":0,"op":"session.create","args":{"sub":"in-place"}}"#)
        let token = try #require(try connection.readResponse()["result"]?["session"]?.stringValue)

        // One write: the server reads them in one pass and batches their answers.
        let requests = [
            #"{"id":1,"op":"ping"}"#,
            #"{"id":2,"op":"session.get","args":{"session":"kh_\#(String(repeating: "A", count: 43))"}}"#,
            #"{"id":3,"op":"session.get","args":{"session":"\#(token)"}}"#,
            #"{"id":4,"op":"ping","args":{"bogus":true}}"#,
            #"{"id":"five","op":"session.get","args":{"session":"\#(token)"}}"#,
            #"{"op":"ping"}"#,
        ]
        try connection.send(requests.flatMap(Self.frame))
        let answers = try requests.map { _ in try connection.readResponse() }
        #expect(answers.map { $0["id"] } == [1, 2, 3, 4, "five", .null])
        #expect(answers.map { $0["ok"] } == [true, false, true, false, true, true])
        #expect(answers[0]["result"]?["protocol"] == 1)
        #expect(answers[0]["result"]?["version"] == .string(KeyholeVersion.current))
        #expect(answers[1]["error"]?["code"] == "session_not_found")
        #expect(answers[2]["result"]?["sub"] == "in-place")
        #expect(answers[2]["result"]?["issuer"] == "local")
        #expect(answers[3]["error"]?["code"] == "bad_request")
        #expect(answers[4]["result"] == answers[2]["result"])
        #expect(answers[5]["result"]?["uptime_ms"]?.intValue != nil)
        #expect(try daemon.terminate() == 0)
    }

    @Test("a session.get behind a create in the same batch waits for the create to be durable, then answers whole")
    func getBehindACreate() throws {
        let daemon = try DaemonProcess.start(config: "[storage]\nfsync = \"always\"\n")
        let connection = try RawConnection(path: daemon.socketPath)
        try connection.sendFrame(#"{"id":0,"op":"session.create","args":{"sub":"first"}}"#)
        let token = try #require(try connection.readResponse()["result"]?["session"]?.stringValue)
        for round in 0..<20 {
            // The get is read in the pass that queued the create, before its commit: it must wait.
            try connection.send(Self.frame(#"{"id":1,"op":"session.create","args":{"sub":"second-\#(round)"}}"#)
                                + Self.frame(#"{"id":2,"op":"session.get","args":{"session":"\#(token)"}}"#)
                                + Self.frame(#"{"id":3,"op":"ping"}"#))
            var answers: [JSONValue: JSONValue] = [:]
            for _ in 0..<3 {
                let answer = try connection.readResponse()
                answers[answer["id"]!] = answer
            }
            #expect(answers[1]?["ok"] == true)
            #expect(answers[2]?["result"]?["sub"] == "first", "round \(round)")
            #expect(answers[3]?["result"]?["protocol"] == 1)
        }
        #expect(try daemon.terminate() == 0)
    }
}
