import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// keyholed's metrics (Sources/KeyholeMetrics/METRICS.md) from a child keyholed: the text at
/// /metrics, from `stats` and from `keyhole metrics`, checked by Prometheus's own promtool, with
/// counters that move with real requests, and nothing a client sent in it.
@Suite("metrics, end to end", .serialized, .ownThreads)
struct MetricsEndToEndTests {
    static let promtool = "/usr/bin/promtool"

    /// The value of the sample `series` (name and labels as written) in `text`, or nil.
    static func value(_ text: String, _ series: String) -> Double? {
        for line in text.split(separator: "\n") where line.hasPrefix(series + " ") {
            return Double(line.dropFirst(series.count + 1))
        }
        return nil
    }

    /// promtool's verdict on `text`: its exit status and what it printed.
    static func check(_ text: String) async throws -> (status: Int32, output: String) {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("khmetrics-\(UUID().uuidString).txt")
        try text.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        let run = try await ChildProcess.runOffPool(["/bin/sh", "-c", "exec \"$0\" check metrics < \"$1\"", promtool, file.path])
        return (run.status, run.stdout + run.stderr)
    }

    static func metrics(_ path: String) throws -> String {
        let answer = try HTTPExchange(try RawConnection(path: path)).request("GET", "/metrics")
        #expect(answer.status == 200)
        #expect(answer.header("Content-Type") == "text/plain; version=0.0.4; charset=utf-8")
        return answer.body
    }

    @Test("the text passes promtool (which does fail a broken one), has every family from the start, and its counters move with requests")
    func countersMove() async throws {
        #expect(FileManager.default.isExecutableFile(atPath: Self.promtool), "promtool (Debian's prometheus package) is required")
        let (daemon, path) = try HTTPListenerEndToEndTests.start()
        let before = try Self.metrics(path)
        let verdict = try await Self.check(before)
        #expect(verdict.status == 0, "\(verdict.output)")
        // A control: promtool does refuse what breaks the conventions (a counter without _total).
        let broken = try await Self.check("# HELP keyholed_things Things.\n# TYPE keyholed_things counter\nkeyholed_things 1\n")
        #expect(broken.status != 0)
        for family in ["keyholed_build_info", "keyholed_requests_total", "keyholed_request_duration_seconds", "keyholed_connections_open",
                       "keyholed_connections_accepted_total", "keyholed_connections_refused_total", "keyholed_frame_errors_total",
                       "keyholed_slow_readers_total", "keyholed_verified_token_cache_hits_total", "keyholed_users", "keyholed_sessions",
                       "keyholed_sessions_created_total", "keyholed_sessions_revoked_total", "keyholed_log_syncs_total",
                       "keyholed_log_sync_duration_seconds", "keyholed_log_bytes", "keyholed_snapshots_total",
                       "keyholed_snapshot_duration_seconds", "keyholed_storage_up", "keyholed_apple_notifications_total",
                       "keyholed_authz_answers_total", "process_cpu_seconds_total", "process_resident_memory_bytes",
                       "process_open_fds", "process_start_time_seconds"] {
            #expect(before.contains("# TYPE \(family) "), "\(family)")
        }

        let main = try RawConnection(path: daemon.socketPath)
        let token = try #require(try main.result("session.create", ["sub": "alice"])["session"]?.stringValue)
        for _ in 0..<3 { _ = try main.result("session.get", ["session": .string(token)]) }
        _ = try main.call("session.get", ["session": "kh_nope"])
        _ = try main.call("no.such.op")
        _ = try main.result("session.revoke", ["session": .string(token)])
        let http = HTTPExchange(try RawConnection(path: path))
        #expect(try http.request("GET", "/authz", headers: ["Cookie": "kh_session=\(token)"]).status == 401)
        #expect(try http.request("GET", "/authz?require=x%ZZ").status == 400)

        let after = try Self.metrics(path)
        #expect(Self.value(after, #"keyholed_requests_total{op="session.create",code="ok"}"#) == 1)
        #expect(Self.value(after, #"keyholed_requests_total{op="session.get",code="ok"}"#) == 3)
        #expect(Self.value(after, #"keyholed_requests_total{op="unknown",code="unknown_op"}"#) == 1)
        // Each answer timed once: the three found and the one refused (on the epoll loop, as its pass ended).
        #expect(Self.value(after, #"keyholed_request_duration_seconds_count{op="session.get"}"#) == 4)
        #expect(Self.value(after, #"keyholed_sessions_created_total"#) == 1)
        #expect(Self.value(after, #"keyholed_sessions_revoked_total{reason="revoke"}"#) == 1)
        #expect(Self.value(after, #"keyholed_authz_answers_total{result="unauthorized"}"#) == 1)
        #expect(Self.value(after, #"keyholed_authz_answers_total{result="bad_request"}"#) == 1)
        #expect(Self.value(after, "keyholed_users") == 1)
        #expect(Self.value(after, "keyholed_connections_accepted_total") ?? 0 >= 1)
        #expect(Self.value(after, "keyholed_log_syncs_total") ?? 0 >= 2)
        #expect(Self.value(after, "keyholed_log_sync_duration_seconds_count") ?? 0 >= 2)
        #expect(Self.value(after, "keyholed_storage_up") == 1)
        #expect(Self.value(after, "process_open_fds") ?? 0 > 3)
        #expect(after.contains(#"keyholed_build_info{version=""#))
        let check = try await Self.check(after)
        #expect(check.status == 0, "\(check.output)")

        // The same text (the same families) over the main socket and from the command line.
        let stats = try main.result("stats", ["format": "prometheus"])
        #expect(stats["prometheus"]?.stringValue?.contains(#"keyholed_requests_total{op="session.create",code="ok"} 1"#) == true)
        let printed = try await ChildProcess.runOffPool([AccessEndToEndTests.keyhole, "metrics", "--socket", daemon.socketPath])
        #expect(printed.status == 0)
        #expect(printed.stdout.contains(#"keyholed_sessions_created_total 1"#), "\(printed.stdout.prefix(400))")
        #expect(try main.errorCode("stats", ["format": "xml"]) == "bad_request")
        try HTTPListenerEndToEndTests.stop(daemon)
    }

    @Test("nothing a client sent reaches the text: not a hostile token's claims, not a sub, not an op name")
    func noClientInput() throws {
        let (daemon, path) = try HTTPListenerEndToEndTests.start()
        let main = try RawConnection(path: daemon.socketPath)
        let marker = "ZZmarker"
        func segment(_ json: String) -> String {
            Data(json.utf8).base64EncodedString().replacingOccurrences(of: "=", with: "").replacingOccurrences(of: "+", with: "-")
                .replacingOccurrences(of: "/", with: "_")
        }
        // Tokens naming no configured issuer, with the marker in every claim and in the header.
        for iss in ["https://appleid.apple.com", "\(marker)-iss"] {
            let header = segment(#"{"alg":"RS256","kid":"\#(marker)-kid"}"#)
            let payload = segment(#"{"iss":"\#(iss)","sub":"\#(marker)-sub","aud":"\#(marker)-aud","exp":4102444800,"email":"\#(marker)@x"}"#)
            _ = try main.call("token.verify", ["token": .string("\(header).\(payload).\(segment(marker))")])
        }
        _ = try main.call("token.verify", ["token": .string("\(marker).\(marker)")])
        _ = try main.result("session.create", ["sub": .string("\(marker)-session"), "data": ["k": .string(marker)]])
        _ = try main.call("\(marker).op")
        _ = try main.call("session.get", ["session": .string("kh_\(marker)")])
        let http = HTTPExchange(try RawConnection(path: path))
        _ = try http.request("GET", "/\(marker)")
        _ = try http.request("GET", "/authz?require=\(marker)", headers: ["Cookie": "kh_session=\(marker)"])
        let text = try Self.metrics(path)
        #expect(!text.contains(marker))
        #expect(Self.value(text, #"keyholed_token_verifications_total{issuer="none",result="token_issuer_unknown"}"#) == 2)
        #expect(Self.value(text, #"keyholed_token_verifications_total{issuer="none",result="token_malformed"}"#) == 1)
        try HTTPListenerEndToEndTests.stop(daemon)
    }

    @Test("a token that verifies counts under its issuer's ok, whether verified or answered from the cache; a refused hit under its code")
    func verifiedTokensCounted() throws {
        let token = try TokenEndToEndTests.token("apple_token_4.jwt")
        let claims = try TokenEndToEndTests.claims(token)
        let iat = claims["iat"]!.intValue!
        // A second issuer, listed first: the count must go to the issuer that vouched, not the first.
        let keySet = "apple_jwks_panva-wellknown-20241001.json"
        let google = """
            [[issuer]]
            name = "google"
            preset = "google"
            jwks_uri = "\(TokenEndToEndTests.apple.appendingPathComponent(keySet).path)"
            audiences = ["web.apps.googleusercontent.com"]

            """
        let (daemon, path) = try HTTPListenerEndToEndTests.start(
            config: google + TokenEndToEndTests.config(keySet: keySet, audiences: [claims["aud"]!.stringValue!, "com.example.web"]),
            arguments: ["--fixed-clock", "\(iat + 60)"])
        let main = try RawConnection(path: daemon.socketPath)
        // Verified, then twice from the cache; then a hit refused: not for the audience asked.
        for _ in 0..<3 { _ = try main.result("token.verify", ["token": .string(token)]) }
        #expect(try main.errorCode("token.verify", ["token": .string(token), "audience": "com.example.web"]) == "token_audience_invalid")
        let text = try Self.metrics(path)
        #expect(Self.value(text, #"keyholed_token_verifications_total{issuer="apple",result="ok"}"#) == 3)
        #expect(Self.value(text, #"keyholed_token_verifications_total{issuer="google",result="ok"}"#) == 0)
        #expect(Self.value(text, #"keyholed_token_verifications_total{issuer="apple",result="token_audience_invalid"}"#) == 1)
        #expect(Self.value(text, "keyholed_verified_token_cache_hits_total") == 3, "the refused hit is a hit too")
        #expect(Self.value(text, "keyholed_verified_token_cache_misses_total") == 1)
        try HTTPListenerEndToEndTests.stop(daemon)
    }

    @Test("[metrics] enabled = false: nothing is recorded, the figures read when the text is made still are")
    func disabled() throws {
        let (daemon, path) = try HTTPListenerEndToEndTests.start(config: "[metrics]\nenabled = false\n")
        let main = try RawConnection(path: daemon.socketPath)
        _ = try main.result("session.create", ["sub": "alice"])
        let text = try Self.metrics(path)
        #expect(!text.contains("keyholed_requests_total"))
        #expect(Self.value(text, "keyholed_users") == 1)
        try HTTPListenerEndToEndTests.stop(daemon)
    }
}
