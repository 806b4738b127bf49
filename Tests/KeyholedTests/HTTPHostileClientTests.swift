import Foundation
import KeyholeTestSupport
import Testing

/// The HTTP listener against clients that would make keyholed hold memory or connection slots for
/// them, or write what they sent into its log (found by review): keyholed as a child process.
@Suite("HTTP listener: hostile clients, end to end", .serialized, .ownThreads)
struct HTTPHostileClientTests {
    /// keyholed's resident memory, KiB.
    static func residentKiB(_ pid: pid_t) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kib = Int(line.split(separator: " ", omittingEmptySubsequences: true)[1])
        else { throw RawConnection.Failure(description: "no VmRSS") }
        return kib
    }

    /// Sends `bytes` without blocking until the socket takes no more; returns how many went.
    static func sendWhileTaken(_ connection: RawConnection, _ bytes: [UInt8]) -> Int {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { Glibc.send(connection.fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT)) }
            guard count > 0 else { break }
            sent += count
        }
        return sent
    }

    @Test("an Upgrade or a CONNECT is the connection's last request: answered with Connection: close, nothing after it read or kept")
    func upgradeEndsTheConnection() throws {
        let (daemon, path) = try HTTPListenerEndToEndTests.start()
        let before = try Self.residentKiB(daemon.pid)
        for request in ["GET /healthz HTTP/1.1\r\nHost: k\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
                        "CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\n"] {
            let http = HTTPExchange(try RawConnection(path: path))
            // The request, then a stream that would pile up in the decoder if keyholed went on reading.
            _ = Self.sendWhileTaken(http.connection, Array(request.utf8) + [UInt8](repeating: 0x41, count: 4 << 20))
            let answer = try http.readAnswer()
            #expect(answer.header("Connection") == "close", "\(request)")
            #expect(try http.readsEndOfStream())
        }
        #expect(try Self.residentKiB(daemon.pid) - before < 32 << 10)
        try HTTPListenerEndToEndTests.stop(daemon)
    }

    @Test("a client that pipelines without reading is held back: keyholed stops reading it, and its memory stays bounded")
    func unreadAnswersAreBounded() throws {
        let (daemon, path) = try HTTPListenerEndToEndTests.start()
        let before = try Self.residentKiB(daemon.pid)
        let greedy = try RawConnection(path: path)
        // /authz without a credential: each answer (401) is counted in the metrics.
        let request = Array("GET /authz HTTP/1.1\r\nHost: k\r\n\r\n".utf8)
        var sent = 0
        // For three seconds, send whatever keyholed takes. Answered at ~30 µs a request, a reader
        // that went on reading would take megabytes; one that stops while its answers go unread
        // takes what the sockets' buffers hold.
        let chunk = Array([[UInt8]](repeating: request, count: 2000).joined())
        let end = Date().addingTimeInterval(3)
        while Date() < end {
            let went = Self.sendWhileTaken(greedy, chunk)
            sent += went
            if went == 0 { usleep(5000) }
        }
        // What the sockets' buffers and the channel's 64 KiB hold is a thousand answers or so; a
        // reader that went on would answer thousands a second.
        let metrics = try HTTPExchange(try RawConnection(path: path)).request("GET", "/metrics").body
        let answered = MetricsEndToEndTests.value(metrics, #"keyholed_authz_answers_total{result="unauthorized"}"#) ?? 0
        #expect(answered > 0 && answered < 5000, "\(answered) answers made for a client that read none (\(sent) bytes taken)")
        #expect(try Self.residentKiB(daemon.pid) - before < 32 << 10)
        // Others are still served.
        #expect(try HTTPExchange(try RawConnection(path: path)).request("GET", "/healthz").status == 200)
        try HTTPListenerEndToEndTests.stop(daemon)
    }

    @Test("a client that does not take its last answer does not keep its connection slot past the head timeout")
    func lastAnswerNotTaken() throws {
        let (daemon, path) = try HTTPListenerEndToEndTests.start("max_connections = 2\nhead_timeout = \"300ms\"\nidle_timeout = \"500ms\"")
        // Answers (the metrics text) that fill the socket's buffers, the last one closing.
        var stuck: [RawConnection] = []
        for _ in 0..<2 {
            let connection = try RawConnection(path: path)
            let many = String(repeating: "GET /metrics HTTP/1.1\r\nHost: k\r\n\r\n", count: 200) + "GET /healthz HTTP/1.1\r\nHost: k\r\nConnection: close\r\n\r\n"
            _ = Self.sendWhileTaken(connection, Array(many.utf8))
            stuck.append(connection)
        }
        // Within a few head timeouts both slots are given back: a new client is served.
        var served = false
        for _ in 0..<100 where !served {
            let http = HTTPExchange(try RawConnection(path: path))
            served = (try? http.request("GET", "/healthz").status) == 200
            if !served { usleep(50_000) }
        }
        // The stuck clients stay connected (unread) while the slots are tried.
        withExtendedLifetime(stuck) { #expect(served) }
        try HTTPListenerEndToEndTests.stop(daemon)
    }

    @Test("a request that cannot be parsed gets one 400, then the close: no further answers, and none of its bytes in the log")
    func badRequestOnce() throws {
        let (daemon, path) = try HTTPListenerEndToEndTests.start()
        let token = "kh_" + String(repeating: "Q", count: 43)
        let http = HTTPExchange(try RawConnection(path: path))
        var bytes = Array("GET /healthz HTTP/1.1\r\nHost k\r\nCookie: kh_session=\(token)\r\n\r\n".utf8)
        bytes += Array(String(repeating: "GET /x HTTP/1.1\r\nCookie: kh_session=\(token)\r\n\r\n", count: 20).utf8)
        try http.connection.send(bytes)
        #expect(try http.readAnswer().status == 400)
        #expect(try http.readsEndOfStream())
        #expect(try HTTPExchange(try RawConnection(path: path)).request("GET", "/healthz").status == 200)
        #expect(!daemon.stderr.contains("QQQQ"))
        try HTTPListenerEndToEndTests.stop(daemon)
    }
}
