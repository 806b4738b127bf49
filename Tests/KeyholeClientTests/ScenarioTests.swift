import Foundation
import KeyholeTestSupport
@testable import KeyholeClient
import KeyholeProtocol
import NIOCore
import Testing

/// Every scenario of Protocol/vectors/client_scenarios.json against Protocol/testing/scenario_server.py,
/// run as Protocol/testing/README.md says (PROTOCOL.md section 8).
@Suite("Client conformance scenarios", .serialized, .ownThreads)
struct ScenarioTests {
    static let file: JSONValue = {
        let url = ScriptProcess.repositoryRoot.appendingPathComponent("Protocol/vectors/client_scenarios.json")
        guard let data = try? Data(contentsOf: url), let value = try? JSONValue.parse(ByteBuffer(bytes: data)) else { return .null }
        return value
    }()

    static let scenarios: [JSONValue] = file["scenarios"]?.arrayValue ?? []
    static let names: [String] = scenarios.compactMap { $0["name"]?.stringValue }

    @Test("the scenario file has scenarios")
    func fileIsRead() {
        #expect(Self.names.count >= 20)
    }

    @Test("scenario", arguments: names)
    func scenario(_ name: String) async throws {
        let scenario = try #require(Self.scenarios.first { $0["name"]?.stringValue == name })
        let deadlineMs = try #require(scenario["deadline_ms"]?.intValue ?? Self.file["deadline_ms"]?.intValue)
        let socket = "/tmp/khs-\(UInt32.random(in: 0...UInt32.max)).sock"
        let server = try ScriptProcess.python("scenario_server.py", [socket, name])
        var lines = server.lines.makeAsyncIterator()
        let ready = await lines.next()
        guard ready == "ready" else {
            server.kill()
            let (status, stderr) = await server.wait()
            Issue.record("scenario_server did not get ready (status \(status)): \(stderr)")
            return
        }
        let client = KeyholeClient(socketPath: socket, configuration: .init(deadline: .milliseconds(deadlineMs)))
        let calls = scenario["calls"]?.arrayValue ?? []
        let requests = calls.map { (op: $0["op"]?.stringValue ?? "", args: $0["args"]?.objectValue ?? [:]) }
        var outcomes: [Result<Response, KeyholeClientError>] = []
        if scenario["pipelined"]?.boolValue == true {
            outcomes = await client.sendAll(requests)
        } else {
            for request in requests {
                do throws(KeyholeClientError) {
                    outcomes.append(.success(try await client.send(request.op, args: request.args)))
                } catch {
                    outcomes.append(.failure(error))
                }
            }
        }
        for (index, (call, outcome)) in zip(calls, outcomes).enumerated() {
            Self.check(outcome, against: try #require(call["expect"]), call: "\(name) call \(index)")
        }
        try await client.close()
        let (status, stderr) = await server.wait()
        #expect(status == 0, "scenario_server: \(stderr)")
    }

    @Test("refused-at-connect, with the connection opened before the call: the refusal read while no call waited goes to the next call, which does not reconnect")
    func refusalBeforeTheFirstCall() async throws {
        let socket = "/tmp/khs-\(UInt32.random(in: 0...UInt32.max)).sock"
        let server = try ScriptProcess.python("scenario_server.py", [socket, "refused-at-connect"])
        var lines = server.lines.makeAsyncIterator()
        #expect(await lines.next() == "ready")
        let client = try await KeyholeClient.connect(socketPath: socket, requestTimeout: .seconds(2))
        // The refusal has been read once the connection has closed: the script ends its side right
        // after it, and the refusal comes first on the stream.
        let connection = try #require(client.connector.current)
        try await connection.channel.closeFuture.get()
        #expect(!connection.isUsable)
        await #expect(throws: ProtocolError.self) {
            do {
                _ = try await client.call("ping")
            } catch let error as ProtocolError {
                #expect(error.code == .overloaded && error.retryAfterMs == 1000)
                throw error
            }
        }
        try await client.close()
        let (status, stderr) = await server.wait()
        #expect(status == 0, "scenario_server: \(stderr)")
    }

    /// Checks one call's outcome against its `expect` (Protocol/testing/README.md, step 4).
    static func check(_ outcome: Result<Response, KeyholeClientError>, against expect: JSONValue, call: String) {
        var code: String?
        var message: String?
        var retryAfterMs: Int?
        var result: [String: JSONValue]?
        switch outcome {
        case .success(let response):
            switch response.outcome {
            case .success(let value): result = value
            case .failure(let error): (code, message, retryAfterMs) = (error.code.rawValue, error.message, error.retryAfterMs)
            }
        case .failure(let error):
            (code, message, retryAfterMs) = (error.code, error.message, error.retryAfterMs)
        }
        if let expected = expect["ok"] {
            #expect(result.map(JSONValue.object) == expected, "\(call): got \(String(describing: result)) / \(code ?? "") \(message ?? "")")
        } else if let atLeast = expect["ok_padding_bytes_at_least"]?.intValue {
            let padding = result?["padding"]?.stringValue?.utf8.count ?? -1
            #expect(padding >= atLeast, "\(call): padding \(padding) bytes; error \(code ?? "none") \(message ?? "")")
        } else if let error = expect["error"] {
            #expect(code == error["code"]?.stringValue, "\(call): got \(code ?? "a result"): \(message ?? "")")
            if let expected = error["message"]?.stringValue { #expect(message == expected, "\(call)") }
            if let expected = error["retry_after_ms"]?.intValue { #expect(retryAfterMs.map(Int64.init) == expected, "\(call)") }
        } else {
            Issue.record("\(call): unknown expectation \(expect)")
        }
    }
}
