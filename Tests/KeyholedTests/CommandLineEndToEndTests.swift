import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import NIOCore
import Testing

/// The `keyhole` CLI run as a user runs it, against keyholed as a child process.
@Suite("keyhole CLI, end to end", .serialized, .ownThreads)
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
        // The store's figures too, one per line, in the same columns.
        #expect(stats.stdout.split(separator: "\n").contains { $0.hasPrefix("sessions") && $0.hasSuffix(" 0") })
        #expect(stats.stdout.split(separator: "\n").contains { $0.hasPrefix("storage") && $0.hasSuffix(" ok") })

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

    @Test("session create|get|revoke|list and user get|delete; the token read from standard input")
    func sessionsAndUsers() throws {
        let daemon = try DaemonProcess.start()
        let socket = ["--socket", daemon.socketPath]
        let created = try ChildProcess.run([cli, "session", "create", "zoe", "--ttl", "3600", "--data", #"{"k":"v"}"#] + socket)
        #expect(created.status == 0)
        let token = try #require(try json(created.stdout)["session"]?.stringValue)
        let id = try #require(try json(created.stdout)["id"]?.stringValue)

        // From standard input, as the help advises (a token on the command line shows in ps).
        let got = try ChildProcess.run(["/bin/sh", "-c", "printf '%s\\n' \"$T\" | \"$CLI\" session get --socket \"$S\""],
            environment: ["T": token, "CLI": cli, "S": daemon.socketPath])
        #expect(got.status == 0)
        #expect(try json(got.stdout)["data"] == ["k": "v"])
        #expect(try json(got.stdout)["issuer"] == "local")

        let listed = try ChildProcess.run([cli, "session", "list", "zoe"] + socket)
        #expect(try json(listed.stdout)["sessions"]?.arrayValue?.first?["id"]?.stringValue == id)
        #expect(!listed.stdout.contains(token))

        let user = try ChildProcess.run([cli, "user", "get", "zoe", "--issuer", "local"] + socket)
        #expect(try json(user.stdout)["sub"] == "zoe")

        let revoked = try ChildProcess.run([cli, "session", "revoke", "--id", id] + socket)
        #expect(try json(revoked.stdout)["revoked"] == true)
        let gone = try ChildProcess.run([cli, "session", "get", token] + socket)
        #expect(gone.status == 1)
        #expect(gone.stderr.contains("session_not_found"))

        let snapshot = try ChildProcess.run([cli, "snapshot"] + socket)
        #expect(snapshot.status == 0)
        #expect(try json(snapshot.stdout)["sessions"] == 0)
        #expect(try json(snapshot.stdout)["users"] == 1)

        let deleted = try ChildProcess.run([cli, "user", "delete", "zoe"] + socket)
        #expect(try json(deleted.stdout)["deleted"] == true)
        let missing = try ChildProcess.run([cli, "user", "get", "zoe"] + socket)
        #expect(missing.status == 1)
        #expect(missing.stderr.contains("user_not_found"))
        #expect(try daemon.terminate() == 0)
    }

    @Test("no keyholed to talk to exits 2")
    func cannotConnect() throws {
        let result = try ChildProcess.run([cli, "ping", "--socket", "/tmp/keyhole-no-such-\(UInt32.random(in: 0...UInt32.max)).sock"])
        #expect(result.status == 2)
        #expect(result.stderr.contains("cannot connect"))
    }

    @Test("keygen writes 32 random bytes with mode 0600 and never overwrites a key")
    func keygen() throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let first = directory.appendingPathComponent("store.key").path
        let second = directory.appendingPathComponent("other.key").path
        #expect(try ChildProcess.run([cli, "keygen", first]).status == 0)
        #expect(try ChildProcess.run([cli, "keygen", second]).status == 0)
        let a = try Data(contentsOf: URL(fileURLWithPath: first))
        let b = try Data(contentsOf: URL(fileURLWithPath: second))
        #expect(a.count == 32 && b.count == 32)
        #expect(a != b)
        var status = stat()
        #expect(stat(first, &status) == 0)
        #expect(status.st_mode & 0o777 == 0o600)
        let again = try ChildProcess.run([cli, "keygen", first])
        #expect(again.status == 1)
        #expect(again.stderr.contains("File exists"))
        #expect(try Data(contentsOf: URL(fileURLWithPath: first)) == a)
    }
}
