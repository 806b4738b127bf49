import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Testing

/// The `keyhole` CLI run as a user runs it, against keyholed as a child process.
@Suite("keyhole CLI, end to end", .serialized)
struct CommandLineEndToEndTests {
    let cli = ChildProcess.builtProduct("keyhole").path

    func json(_ text: String) throws -> JSONValue {
        try JSONValue.parse(ByteBuffer(string: text))
    }

    @Test("ping and stats: text and --json, socket from --socket or KEYHOLE_SOCKET; exit 0")
    func pingAndStats() throws {
        let daemon = try DaemonProcess.start()
        let ping = try ChildProcess.run([cli, "ping", "--socket", daemon.socketPath])
        #expect(ping.status == 0)
        #expect(ping.stdout.contains("keyholed \(KeyholeVersion.current) (protocol 1)"))

        let pingJSON = try ChildProcess.run([cli, "ping", "--json"], environment: ["KEYHOLE_SOCKET": daemon.socketPath])
        #expect(pingJSON.status == 0)
        #expect(try json(pingJSON.stdout)["protocol"] == 1)

        let stats = try ChildProcess.run([cli, "stats"], environment: ["KEYHOLE_SOCKET": daemon.socketPath])
        #expect(stats.status == 0)
        #expect(stats.stdout.contains("requests ping"))

        let statsJSON = try ChildProcess.run([cli, "stats", "--json", "--socket", daemon.socketPath])
        #expect(statsJSON.status == 0)
        #expect(try json(statsJSON.stdout)["requests"]?["ping"] == 2)
        #expect(try daemon.terminate() == 0)
    }

    @Test("call prints the response; an error response exits 1 with its code on stderr")
    func call() throws {
        let daemon = try DaemonProcess.start()
        let echo = try ChildProcess.run([cli, "call", "debug.echo", #"{"a":[1,"x"]}"#, "--socket", daemon.socketPath])
        #expect(echo.status == 0)
        let response = try json(echo.stdout)
        #expect(response["ok"] == true)
        #expect(response["result"] == ["a": [1, "x"]])

        let unknown = try ChildProcess.run([cli, "call", "no.such.op", "--socket", daemon.socketPath])
        #expect(unknown.status == 1)
        #expect(try json(unknown.stdout)["error"]?["code"] == "unknown_op")
        #expect(unknown.stderr.contains("unknown_op"))

        let badArgs = try ChildProcess.run([cli, "call", "ping", "[1]", "--socket", daemon.socketPath])
        #expect(badArgs.status == 64)
        #expect(badArgs.stderr.contains("JSON object"))
        #expect(try daemon.terminate() == 0)
    }

    @Test("no keyholed to talk to exits 2")
    func cannotConnect() throws {
        let result = try ChildProcess.run([cli, "ping", "--socket", "/tmp/keyhole-no-such-\(UInt32.random(in: 0...UInt32.max)).sock"])
        #expect(result.status == 2)
        #expect(result.stderr.contains("cannot connect"))
    }
}
