import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// keyholed's HTTP listener (Sources/KeyholeHTTP/HTTP.md) with keyholed as a child process, asked by
/// hand-written HTTP over its Unix socket and its loopback TCP address.
@Suite("HTTP listener: forward-auth and health, end to end", .serialized, .ownThreads)
struct HTTPListenerEndToEndTests {
    /// keyholed with `[http]` on `<dir>/h.sock` (mode 0666 where `open`), `extra` keys added to the
    /// section, `arguments` after `--enable-debug-ops`; ready once the listener is.
    static func start(_ extra: String = "", open: Bool = false, config: String = "", arguments: [String] = []) throws -> (DaemonProcess, String) {
        let directory = try DaemonProcess.makeDirectory()
        let path = directory.appendingPathComponent("h.sock").path
        let mode = open ? "socket_mode = \"0666\"\n" : ""
        let daemon = try DaemonProcess(
            config: "[http]\nsocket = \"\(path)\"\n\(mode)\(extra)\n\(config)", arguments: ["--enable-debug-ops"] + arguments, directory: directory)
        try daemon.waitUntilReady()
        try daemon.waitForStderr(containing: "http.listening")
        if open { chmod(directory.path, 0o711) }
        return (daemon, path)
    }

    static func stop(_ daemon: DaemonProcess) throws {
        #expect(try daemon.terminate() == 0)
        try? FileManager.default.removeItem(at: daemon.directory)
    }

    /// A loopback port nothing listens on now.
    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = in_addr_t(UInt32(0x7F00_0001).bigEndian)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
        }
        guard bound else { throw RawConnection.Failure(description: "no free port: \(errno)") }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    static let identityHeaders = ["X-Auth-Request-User", "X-Auth-Request-Issuer", "X-Auth-Request-Email", "X-Keyhole-Session-Id",
                                  "X-Keyhole-Session-Expires"]

    @Test("/authz: 401 without a session (identity headers present and empty), 200 with the cookie or the bearer, headers from the session and user; revoked: 401 at once")
    func forwardAuth() throws {
        let (daemon, path) = try Self.start()
        let main = try RawConnection(path: daemon.socketPath)
        let created = try main.result("session.create", ["sub": "alice", "data": ["role": "admin", "staff": true, "teams": ["a", "b"]]])
        let token = try #require(created["session"]?.stringValue)
        let id = try #require(created["id"]?.stringValue)
        _ = try main.result("user.update", ["sub": "alice", "email": "alice@example.com"])
        let http = HTTPExchange(try RawConnection(path: path))

        let anonymous = try http.request("GET", "/authz")
        #expect(anonymous.status == 401)
        #expect(anonymous.header("WWW-Authenticate") == #"Bearer realm="keyhole""#)
        #expect(anonymous.header("Cache-Control") == "no-store")
        for name in Self.identityHeaders { #expect(anonymous.header(name) == "", "\(name)") }
        #expect(anonymous.header("Set-Cookie") == nil && anonymous.header("Location") == nil)

        // One connection, kept alive: the cookie among others, then the bearer.
        let byCookie = try http.request("GET", "/authz", headers: ["Cookie": "theme=dark; kh_session=\(token); other=1"])
        #expect(byCookie.status == 200 && byCookie.body.isEmpty)
        #expect(byCookie.header("X-Auth-Request-User") == "alice")
        #expect(byCookie.header("X-Auth-Request-Issuer") == "local")
        #expect(byCookie.header("X-Auth-Request-Email") == "alice@example.com")
        #expect(byCookie.header("X-Keyhole-Session-Id") == id)
        let expires = try #require(byCookie.header("X-Keyhole-Session-Expires").flatMap { Int64($0) })
        #expect(expires <= created["expires_at"]?.intValue ?? 0 && expires > 1_700_000_000)
        let byBearer = try http.request("HEAD", "/authz", headers: ["Authorization": "Bearer \(token)"])
        #expect(byBearer.status == 200 && byBearer.header("X-Auth-Request-User") == "alice")

        // Not a token's shape, or a token of no session: 401. A bearer decides over the cookie.
        #expect(try http.request("GET", "/authz", headers: ["Cookie": "kh_session=\(token)x"]).status == 401)
        #expect(try http.request("GET", "/authz", headers: ["Cookie": "kh_session=kh_\(String(repeating: "A", count: 43))"]).status == 401)
        #expect(try http.request("GET", "/authz", headers: ["Authorization": "Bearer kh_short", "Cookie": "kh_session=\(token)"]).status == 401)
        // Never from the query string.
        #expect(try http.request("GET", "/authz?session=\(token)").status == 400)

        // require: met, unmet (403 with empty identity headers), malformed (400).
        #expect(try http.request("GET", "/authz?require=role:admin&require=staff&require=teams:b", headers: ["Cookie": "kh_session=\(token)"]).status == 200)
        let unmet = try http.request("GET", "/authz?require=role:user", headers: ["Cookie": "kh_session=\(token)"])
        #expect(unmet.status == 403 && unmet.header("X-Auth-Request-User") == "")
        #expect(try http.request("GET", "/authz?require=teams:c", headers: ["Cookie": "kh_session=\(token)"]).status == 403)
        #expect(try http.request("GET", "/authz?require=bad%ZZ", headers: ["Cookie": "kh_session=\(token)"]).status == 400)
        #expect(try http.request("GET", "/authz?require=a%20b", headers: ["Cookie": "kh_session=\(token)"]).status == 400)

        _ = try main.result("session.revoke", ["session": .string(token)])
        #expect(try http.request("GET", "/authz", headers: ["Cookie": "kh_session=\(token)"]).status == 401)
        try Self.stop(daemon)
    }

    @Test("identity headers carry a hostile sub and issuer-side bytes percent-encoded: no CR, LF, control or non-ASCII byte, nothing injected")
    func hostileValues() throws {
        let (daemon, path) = try Self.start()
        let main = try RawConnection(path: daemon.socketPath)
        let sub = "eve\r\nX-Auth-Request-User: admin\u{0}%é"
        let token = try #require(try main.result("session.create", ["sub": .string(sub)])["session"]?.stringValue)
        _ = try main.result("user.update", ["sub": .string(sub), "email": "e\nve@example.com"])
        let http = HTTPExchange(try RawConnection(path: path))
        let answer = try http.request("GET", "/authz", headers: ["Cookie": "kh_session=\(token)"])
        #expect(answer.status == 200)
        #expect(answer.header("X-Auth-Request-User") == "eve%0D%0AX-Auth-Request-User:%20admin%00%25%C3%A9")
        #expect(answer.header("X-Auth-Request-Email") == "e%0Ave@example.com")
        #expect(answer.headers.filter { $0.name == "X-Auth-Request-User" }.count == 1)
        try Self.stop(daemon)
    }

    @Test("limits: 431 past 16 KiB of head, a body announced is not waited for, a bad head is 400, pipelined requests answered in order; a slow head gets 408, an idle connection is closed")
    func limits() throws {
        let (daemon, path) = try Self.start("head_timeout = \"300ms\"\nidle_timeout = \"500ms\"\nmax_connections = 8")
        let big = HTTPExchange(try RawConnection(path: path))
        let refused = try big.request("GET", "/healthz", headers: ["X-Big": String(repeating: "a", count: 17 * 1024)])
        #expect(refused.status == 431)
        #expect(try big.readsEndOfStream())
        // Just under the limit is served.
        #expect(try HTTPExchange(try RawConnection(path: path)).request("GET", "/healthz", headers: ["X-Big": String(repeating: "a", count: 15 * 1024)]).status == 200)

        // A POST announcing a megabyte it never sends: answered at once, then closed.
        let post = HTTPExchange(try RawConnection(path: path))
        let answer = try post.request("POST", "/authz", headers: ["Content-Length": "1000000"])
        #expect(answer.status == 405 && answer.header("Allow") == "GET, HEAD" && answer.header("Connection") == "close")
        #expect(try post.readsEndOfStream())

        let garbage = HTTPExchange(try RawConnection(path: path))
        try garbage.connection.send(Array("NOT HTTP AT ALL\r\n\r\n".utf8))
        #expect(try garbage.readAnswer().status == 400)
        #expect(try garbage.readsEndOfStream())

        // Two requests in one write: two answers, in order, on the same connection.
        let pipelined = HTTPExchange(try RawConnection(path: path))
        try pipelined.connection.send(Array("GET /nothing HTTP/1.1\r\nHost: k\r\n\r\nGET /healthz HTTP/1.1\r\nHost: k\r\n\r\n".utf8))
        #expect(try pipelined.readAnswer().status == 404)
        let health = try pipelined.readAnswer()
        #expect(health.status == 200 && health.body == #"{"status":"ok"}"#)

        // A head cut short: 408 once head_timeout passes, then closed.
        let slow = HTTPExchange(try RawConnection(path: path))
        try slow.connection.send(Array("GET /healthz HTTP/1.1\r\nHost: k\r\n".utf8))
        #expect(try slow.readAnswer().status == 408)
        #expect(try slow.readsEndOfStream())
        // Nothing sent at all: closed after idle_timeout, without an answer.
        let idle = HTTPExchange(try RawConnection(path: path))
        #expect(try idle.readsEndOfStream())
        try Self.stop(daemon)
    }

    @Test("max_connections: one more is answered 503 and closed")
    func maxConnections() throws {
        let (daemon, path) = try Self.start("max_connections = 2")
        let first = HTTPExchange(try RawConnection(path: path))
        let second = HTTPExchange(try RawConnection(path: path))
        #expect(try first.request("GET", "/healthz").status == 200)
        #expect(try second.request("GET", "/healthz").status == 200)
        let third = HTTPExchange(try RawConnection(path: path))
        #expect(try third.readAnswer().status == 503)
        #expect(try third.readsEndOfStream())
        try Self.stop(daemon)
    }

    @Test("TCP on loopback: its peers get listen_allow only (health by default); the Unix socket judges peer credentials, and [[access]] rules name the new groups")
    func access() async throws {
        let port = try Self.freePort()
        let (daemon, path) = try Self.start("listen = \"127.0.0.1:\(port)\"", open: true)
        let tcp = HTTPExchange(try RawConnection(loopbackPort: port))
        #expect(try tcp.request("GET", "/healthz").status == 200)
        let denied = try tcp.request("GET", "/authz")
        #expect(denied.status == 403 && denied.header("X-Auth-Request-User") == "")
        #expect(try tcp.request("GET", "/metrics").status == 403)
        try daemon.waitForStderr(containing: "http.denied")

        // As www-data: a stranger to the socket's group gets 403; in it (effective group root's), 200.
        #expect(try await Self.status(as: ["--reuid=33", "--regid=33", "--clear-groups"], path: path, target: "/healthz") == "403")
        #expect(try await Self.status(as: ["--reuid=33", "--regid=0", "--clear-groups"], path: path, target: "/healthz") == "200")
        #expect(try await Self.status(as: ["--reuid=33", "--regid=0", "--clear-groups"], path: path, target: "/authz") == "401")
        try Self.stop(daemon)

        let (ruled, rulePath) = try Self.start(open: true, config: "[[access]]\nusers = [33]\nallow = [\"health\"]\n")
        #expect(try await Self.status(as: ["--reuid=33", "--regid=33", "--clear-groups"], path: rulePath, target: "/healthz") == "200")
        #expect(try await Self.status(as: ["--reuid=33", "--regid=33", "--clear-groups"], path: rulePath, target: "/authz") == "403")
        #expect(try await Self.status(as: ["--reuid=33", "--regid=0", "--clear-groups"], path: rulePath, target: "/authz") == "403")
        try Self.stop(ruled)
    }

    /// The status of a GET of `target` sent by python3 running as `ids` (setpriv) over `path`.
    static func status(as ids: [String], path: String, target: String) async throws -> String {
        let script = """
            import socket, sys
            s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
            s.sendall(("GET %s HTTP/1.1\\r\\nHost: k\\r\\nConnection: close\\r\\n\\r\\n" % sys.argv[2]).encode())
            data = b""
            while not data.endswith(b"\\r\\n\\r\\n") and len(data) < 65536:
                chunk = s.recv(1)
                if not chunk: break
                data += chunk
            print(data.split(b" ")[1].decode())
            """
        let run = try await ChildProcess.runOffPool(["/usr/bin/setpriv"] + ids + ["/usr/bin/python3", "-c", script, path, target])
        return run.stdout.trimmingCharacters(in: .whitespacesAndNewlines) + (run.status == 0 ? "" : " exit \(run.status): \(run.stderr)")
    }

    @Test("/healthz: 503 with the reason while storage fails, 200 once it recovers")
    func health() throws {
        let (daemon, path) = try Self.start()
        let main = try RawConnection(path: daemon.socketPath)
        let size = try #require(try main.result("stats")["store"]?["wal_bytes"]?.intValue)
        try setFileSizeLimit(of: daemon.pid, to: UInt(size + 64))
        let data: JSONValue = ["blob": .string(String(repeating: "y", count: 2000))]
        #expect(try main.errorCode("session.create", ["sub": "dave", "data": data]) == "storage_unavailable")
        let failing = try HTTPExchange(try RawConnection(path: path)).request("GET", "/healthz")
        #expect(failing.status == 503 && failing.body == #"{"reason":"storage","status":"unavailable"}"#)
        #expect(failing.header("Content-Type") == "application/json")
        try setFileSizeLimit(of: daemon.pid, to: nil)
        try daemon.waitForStderr(containing: "storage.recovered")
        #expect(try HTTPExchange(try RawConnection(path: path)).request("GET", "/healthz").status == 200)
        try Self.stop(daemon)
    }

    @Test("a socket it cannot bind ends keyholed at once (exit 1, said in the log), not half alive; under socket activation without an http socket, the message names the unit to enable")
    func listenerFailures() throws {
        let unbindable = try DaemonProcess(config: "[http]\nsocket = \"/nonexistent-keyhole-dir/h.sock\"\n")
        #expect(try unbindable.waitForExit(seconds: 30) == 1)
        #expect(unbindable.stderr.contains("http.listen_failed"), "\(unbindable.stderr)")
        try? FileManager.default.removeItem(at: unbindable.directory)

        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let listener = try UnixSocket.bound(to: directory.appendingPathComponent("k.sock").path, listening: 16)
        defer { close(listener) }
        let activated = try DaemonProcess(
            config: "[http]\nsocket = \"/nonexistent-keyhole-dir/h.sock\"\n", directory: directory, listener: listener)
        #expect(try activated.waitForExit(seconds: 30) == 1)
        #expect(activated.stderr.contains("enable keyholed-http.socket"), "\(activated.stderr)")
    }

    @Test("[http] mistakes stop the start with exit 78: a non-loopback listen, a group it does not serve, an unknown key, a bad cookie name")
    func configurationErrors() throws {
        for (section, message) in [
            ("listen = \"0.0.0.0:9180\"", "is not a loopback address"),
            ("listen = \"localhost:9180\"", "is not an IP address"),
            ("listen = \"127.0.0.1:9180\"\nlisten_allow = [\"admin\"]", "is not a group the HTTP listener serves"),
            ("cookie = \"a b\"", "must be a cookie name"),
            ("sockett = \"/x\"", "sockett"),
            ("allow_non_loopback = true", "applies only with listen"),
        ] {
            let daemon = try DaemonProcess(config: "[http]\n\(section)\n")
            #expect(try daemon.waitForExit() == 78, "\(section)")
            #expect(daemon.stderr.contains(message), "\(section): \(daemon.stderr)")
        }
    }
}
