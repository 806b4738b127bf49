import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore

/// Protocol/testing/keyholed_harness.py running this build's keyholed: its socket and the identity
/// token its issuer accepts, and its commands (restart, bounce, chaos, stop).
final class Harness: Sendable {
    let process: ScriptProcess
    let socket: String
    let token: String
    let issuer: String
    let sub: String
    /// The audience of `token`: the issuer's client id.
    let audience: String
    private let replies: AsyncStream<JSONValue>

    private init(process: ScriptProcess, info: JSONValue, replies: AsyncStream<JSONValue>) throws {
        self.process = process
        self.replies = replies
        guard let socket = info["socket"]?.stringValue, let token = info["token"]?.stringValue,
            let issuer = info["issuer"]?.stringValue, let sub = info["sub"]?.stringValue, let audience = info["audience"]?.stringValue
        else { throw RawConnection.Failure(description: "harness said \(info)") }
        (self.socket, self.token, self.issuer, self.sub, self.audience) = (socket, token, issuer, sub, audience)
    }

    /// Starts the harness (with `configExtra` added to keyholed's configuration) and waits for its
    /// first line.
    static func start(configExtra: String? = nil) async throws -> Harness {
        let keyholed = ChildProcess.builtProduct("keyholed").path
        let arguments = configExtra.map { ["--config-extra", $0] } ?? []
        let process = try ScriptProcess.python("keyholed_harness.py", arguments, environment: ["KEYHOLED": keyholed], stdin: true)
        let replies = process.jsonReplies()
        var iterator = replies.makeAsyncIterator()
        guard let info = await iterator.next(), info["socket"] != nil else {
            process.closeInput()
            let (status, stderr) = await process.wait()
            throw RawConnection.Failure(description: "keyholed_harness.py did not start (status \(status)): \(stderr)")
        }
        return try Harness(process: process, info: info, replies: replies)
    }

    /// Sends a command and returns the harness's next line.
    func command(_ line: String) async -> JSONValue? {
        process.send(line)
        return await next()
    }

    /// The harness's next line (nil at its end).
    func next() async -> JSONValue? {
        var iterator = replies.makeAsyncIterator()
        return await iterator.next()
    }

    /// Stops the harness: its exit status (0 only if every keyholed exited 0) and its stderr.
    func stop() async -> (status: Int32, stderr: String) {
        process.send("stop")
        process.closeInput()
        return await process.wait()
    }
}
