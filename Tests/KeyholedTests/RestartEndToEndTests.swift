import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A restart while clients keep asking, with the listening socket held by the test as systemd holds
/// it: clients wait in its backlog while one keyholed stops and the next starts, and none sees an error.
@Suite("restart under load, end to end", .serialized)
struct RestartEndToEndTests {
    /// What the clients saw, and a wait for a number of answers.
    final class Tally: Sendable {
        private let state = Mutex<(answers: Int, retries: Int, errors: [String], tokens: [String], waiters: [(Int, DispatchSemaphore)])>(
            (0, 0, [], [], []))
        let stop = Atomic<Bool>(false)

        func answered(token: String?) {
            state.withLock { state in
                state.answers += 1
                if let token { state.tokens.append(token) }
                state.waiters.removeAll { count, signal in
                    guard state.answers >= count else { return false }
                    signal.signal()
                    return true
                }
            }
        }

        func retried() { state.withLock { $0.retries += 1 } }
        func failed(_ error: String) { state.withLock { $0.errors.append(error) } }

        var answers: Int { state.withLock { $0.answers } }
        var retries: Int { state.withLock { $0.retries } }
        var errors: [String] { state.withLock { $0.errors } }
        var tokens: [String] { state.withLock { $0.tokens } }

        /// Waits until `count` answers in all (at most a minute).
        func wait(untilAnswers count: Int) -> Bool {
            let signal = DispatchSemaphore(value: 0)
            let reached = state.withLock { state in
                if state.answers >= count { return true }
                state.waiters.append((count, signal))
                return false
            }
            return reached || signal.wait(timeout: .now() + .seconds(60)) == .success
        }
    }

    /// A client as the protocol allows: a request left unanswered when the connection closes was
    /// never read (PROTOCOL.md section 5), so it is sent again on a new connection. Anything else
    /// (an error answer, a refused or timed-out connection) is an error.
    final class Client {
        let path: String
        let tally: Tally
        var connection: RawConnection?

        init(path: String, tally: Tally) {
            self.path = path
            self.tally = tally
        }

        func call(_ op: String, _ args: [String: JSONValue]) -> JSONValue? {
            let request: JSONValue = ["op": .string(op), "id": 1, "args": .object(args)]
            while true {
                do {
                    if connection == nil { connection = try RawConnection(path: path, receiveTimeoutSeconds: 30) }
                    try connection!.sendFrame(request.jsonText)
                    if let body = try connection!.readFrame() {
                        let response = try JSONValue.parse(ByteBuffer(bytes: body))
                        guard response["ok"] == true else {
                            tally.failed("\(op): \(response.jsonText)")
                            return nil
                        }
                        return response["result"]
                    }
                } catch let failure as RawConnection.Failure
                    where ["Connection reset by peer", "Broken pipe"].contains(where: failure.description.contains)
                {
                    // Closed with our request unread: as end of stream.
                } catch {
                    tally.failed("\(op): \(error)")
                    return nil
                }
                connection = nil
                tally.retried()
            }
        }

        /// Creates a session and reads it back, until told to stop.
        func run(worker: Int) {
            var n = 0
            while !tally.stop.load(ordering: .relaxed) {
                n += 1
                guard let created = call("session.create", ["sub": .string("w\(worker)"), "data": ["n": .int(Int64(n))]]),
                    let token = created["session"]?.stringValue
                else { return }
                tally.answered(token: token)
                guard let got = call("session.get", ["session": .string(token)]) else { return }
                guard got["data"]?["n"]?.intValue == Int64(n) else {
                    tally.failed("session.get: \(got.jsonText)")
                    return
                }
                tally.answered(token: nil)
            }
        }
    }

    @Test("SIGTERM and a new keyholed on the same socket while 8 clients create and read sessions: every request answered, none an error, every session kept")
    func restartUnderLoad() throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let socket = try ListeningSocket(path: directory.appendingPathComponent("held.sock").path)
        let first = try DaemonProcess(config: "", directory: directory, listener: socket.fd)
        try first.waitUntilReady()

        let tally = Tally()
        let workers = 8
        let done = DispatchGroup()
        for worker in 0..<workers {
            done.enter()
            Thread {
                Client(path: socket.path, tally: tally).run(worker: worker)
                done.leave()
            }.start()
        }
        #expect(tally.wait(untilAnswers: 400), "\(tally.errors)")

        first.signal(SIGTERM)
        #expect(try first.waitForExit() == 0)
        let before = tally.answers
        // Clients queue in the backlog meanwhile: the socket is the test's, not keyholed's.
        let second = try DaemonProcess(config: "", directory: directory, listener: socket.fd)
        try second.waitUntilReady()
        #expect(tally.wait(untilAnswers: before + 400), "\(tally.errors)")
        tally.stop.store(true, ordering: .relaxed)
        #expect(done.wait(timeout: .now() + .seconds(60)) == .success)

        #expect(tally.errors.isEmpty, "\(tally.errors.prefix(5))")
        #expect(first.stderr.contains("systemd.socket_adopted"))
        #expect(second.stderr.contains("records_replayed="))
        // Every session a client was told about survived the restart.
        let tokens = tally.tokens
        let check = try RawConnection(path: socket.path)
        for token in tokens {
            #expect(try check.call("session.get", ["session": .string(token)])["ok"] == true)
        }
        #expect(try check.result("stats")["store"]?["sessions"]?.intValue == Int64(tokens.count))
        print("restart under load: \(tally.answers) answers, \(tokens.count) sessions, \(tally.retries) requests sent again after a close")
        #expect(try second.terminate() == 0)
        // The socket file is the test's: neither keyholed removed it.
        #expect(FileManager.default.fileExists(atPath: socket.path))
    }
}
