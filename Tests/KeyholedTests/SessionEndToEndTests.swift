import Foundation
import KeyholeProtocol
import KeyholeTestSupport
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// Sessions and users through keyholed: the operations, restarts, the state-directory lock, corruption
/// and `--repair`, and a disk that fills up and frees again.
@Suite("sessions and users, end to end", .serialized, .ownThreads)
struct SessionEndToEndTests {
    static let config = """
        [[issuer]]
        name = "corp"
        iss = "https://login.example.com"
        jwks_uri = "\(TokenEndToEndTests.apple.appendingPathComponent("apple_jwks_go-pkgz-auth.json").path)"
        audiences = ["app"]
        """

    @Test("create, get (with the user), list, revoke by token and by id, revoke_all, user update/get/delete")
    func operations() throws {
        let daemon = try DaemonProcess.start(config: Self.config)
        let connection = try RawConnection(path: daemon.socketPath)
        let created = try connection.result("session.create", ["sub": "alice", "data": ["theme": "dark"], "ttl_s": 3600])
        let token = try #require(created["session"]?.stringValue)
        #expect(token.hasPrefix("kh_") && token.count == 46)
        let id = try #require(created["id"]?.stringValue)

        let got = try connection.result("session.get", ["session": .string(token)])
        #expect(got["id"]?.stringValue == id)
        #expect(got["issuer"] == "corp")
        #expect(got["sub"] == "alice")
        #expect(got["data"] == ["theme": "dark"])
        #expect(got["expires_at"]?.intValue == got["created_at"]!.intValue! + 3600)
        #expect(got["idle_timeout_s"] == 3600)
        #expect(got["user"]?["sub"] == "alice")

        let second = try connection.result("session.create", ["sub": "alice", "issuer": "corp"])
        _ = try connection.result("session.create", ["sub": "alice", "issuer": "local"])
        let listed = try connection.result("session.list", ["sub": "alice"])["sessions"]?.arrayValue ?? []
        #expect(Set(listed.compactMap { $0["id"]?.stringValue }) == [id, second["id"]!.stringValue!])

        #expect(try connection.result("session.revoke", ["id": second["id"]!])["revoked"] == true)
        #expect(try connection.result("session.revoke", ["id": second["id"]!])["revoked"] == false)
        #expect(try connection.errorCode("session.get", ["session": second["session"]!]) == "session_not_found")
        #expect(try connection.errorCode("session.get", ["session": "kh_not-a-token"]) == "session_not_found")

        let updated = try connection.result("user.update", ["sub": "alice", "email": "alice@example.com", "name": ["given": "Alice"]])
        #expect(updated["created"] == false)
        #expect(try connection.result("user.get", ["sub": "alice"])["email"] == "alice@example.com")
        #expect(try connection.result("session.get", ["session": .string(token)])["user"]?["name"]?["given"] == "Alice")

        #expect(try connection.result("session.revoke_all", ["sub": "alice"])["revoked"] == 1)
        #expect(try connection.errorCode("session.get", ["session": .string(token)]) == "session_not_found")
        let deleted = try connection.result("user.delete", ["sub": "alice"])
        #expect(deleted["deleted"] == true)
        #expect(try connection.errorCode("user.get", ["sub": "alice"]) == "user_not_found")
        // The local principal is a different user, with their session still there.
        #expect(try connection.result("user.get", ["sub": "alice", "issuer": "local"])["issuer"] == "local")

        // Bad arguments: a clear bad_request, naming what is wrong.
        #expect(try connection.errorCode("session.create", ["sub": "a", "tll_s": 60]) == "bad_request")
        #expect(try connection.errorCode("session.create", ["sub": "a", "issuer": "nope"]) == "bad_request")
        #expect(try connection.errorCode("session.create", ["sub": "a", "ttl_s": 5]) == "bad_request")
        #expect(try connection.errorCode("session.create", ["sub": "a", "data": [1, 2]]) == "bad_request")
        #expect(try connection.errorCode("session.create", ["sub": .string(String(repeating: "x", count: 256))]) == "bad_request")
        let big: JSONValue = ["blob": .string(String(repeating: "x", count: 5000))]
        #expect(try connection.errorCode("session.create", ["sub": "a", "data": big]) == "data_too_large")
        #expect(try connection.errorCode("session.revoke", ["session": .string(token), "id": .string(id)]) == "bad_request")

        let stats = try connection.result("stats")["store"]
        #expect(stats?["sessions"] == 1)
        #expect(stats?["failing"] == false)
        #expect((stats?["syncs"]?.intValue ?? 0) >= 1)
        // Changes read by the event loop were synced by it (commit_on_event_loop is on by default).
        #expect((stats?["inline_syncs"]?.intValue ?? 0) >= 1)
        #expect((stats?["inline_syncs"]?.intValue ?? .max) <= (stats?["syncs"]?.intValue ?? 0))
        #expect(stats?["inline_pauses"]?.intValue != nil)
        #expect(try daemon.terminate() == 0)
    }

    @Test("sessions survive SIGTERM and a restart; a second keyholed on the same state directory refuses to start")
    func restartAndLock() throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        var daemon = try DaemonProcess(config: Self.config, directory: directory)
        try daemon.waitUntilReady()
        var connection = try RawConnection(path: daemon.socketPath)
        let token = try #require(try connection.result("session.create", ["sub": "bob"])["session"])

        let second = try DaemonProcess(config: Self.config, directory: directory, socketPath: directory.appendingPathComponent("other.sock").path)
        #expect(try second.waitForExit() == 1)
        #expect(second.stderr.contains("storage.locked"))
        #expect(second.stderr.contains("in use by another keyholed"))
        // The first one is unharmed.
        #expect(try connection.result("session.get", ["session": token])["sub"] == "bob")
        #expect(try daemon.terminate() == 0)

        daemon = try DaemonProcess(config: Self.config, directory: directory)
        try daemon.waitUntilReady()
        connection = try RawConnection(path: daemon.socketPath)
        #expect(try connection.result("session.get", ["session": token])["sub"] == "bob")
        #expect(daemon.stderr.contains("storage.opened"))
        #expect(try daemon.terminate() == 0)
    }

    @Test("admin.snapshot and snapshot_wal_bytes take snapshots, the log they cover goes, and a restart loads them")
    func snapshots() throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let config = Self.config + "\n[storage]\nsnapshot_wal_bytes = \"64KiB\"\n"
        var daemon = try DaemonProcess(config: config, directory: directory)
        try daemon.waitUntilReady()
        var connection = try RawConnection(path: daemon.socketPath)
        var tokens: [String] = []
        for n in 0..<10 {
            tokens.append(try #require(try connection.result("session.create", ["sub": .string("u\(n)")])["session"]?.stringValue))
        }
        let snapshot = try connection.result("admin.snapshot")
        #expect(snapshot["sessions"]?.intValue == 10)
        #expect(snapshot["users"]?.intValue == 10)
        #expect((snapshot["bytes"]?.intValue ?? 0) > 48)
        #expect((snapshot["wal_bytes_removed"]?.intValue ?? 0) > 0)
        #expect(try connection.errorCode("admin.snapshot", ["now": true]) == "bad_request")
        let store = try connection.result("stats")["store"]
        #expect(store?["snapshots"] == 1)
        #expect(store?["last_snapshot"] == snapshot)
        let state = directory.appendingPathComponent("state")
        #expect(try FileManager.default.contentsOfDirectory(atPath: state.appendingPathComponent("wal").path).count == 1)
        #expect(try FileManager.default.contentsOfDirectory(atPath: state.appendingPathComponent("snapshots").path).count == 1)

        // Past 64 KiB of log, the snapshotter takes one by itself.
        let data = JSONValue.object(["blob": .string(String(repeating: "x", count: 3000))])
        for n in 0..<30 {
            tokens.append(try #require(try connection.result("session.create", ["sub": .string("big\(n)"), "data": data])["session"]?.stringValue))
        }
        try daemon.waitForStderr(containing: "trigger=wal_bytes")
        #expect(!daemon.stderr.contains("storage.snapshot_failed"))
        #expect(try daemon.terminate() == 0)

        daemon = try DaemonProcess(config: config, directory: directory)
        try daemon.waitUntilReady()
        connection = try RawConnection(path: daemon.socketPath)
        for token in tokens {
            #expect(try connection.call("session.get", ["session": .string(token)])["ok"] == true)
        }
        #expect(try connection.result("stats")["store"]?["sessions"] == 40)
        #expect(!daemon.stderr.contains("snapshot_lsn=none"))
        #expect(try daemon.terminate() == 0)
    }

    @Test("a damaged log stops start-up naming file and offset; --repair cuts it, says what was lost, and keyholed starts")
    func corruptionAndRepair() throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        var daemon = try DaemonProcess(config: Self.config, directory: directory)
        try daemon.waitUntilReady()
        var connection = try RawConnection(path: daemon.socketPath)
        var tokens: [JSONValue] = []
        for n in 0..<6 { tokens.append(try connection.result("session.create", ["sub": .string("user\(n)")])["session"]!) }
        #expect(try daemon.terminate() == 0)

        let segment = directory.appendingPathComponent("state/wal/0000000000000001.wal")
        var bytes = try [UInt8](Data(contentsOf: segment))
        // The fourth record's batch: header 32 bytes, then a batch per change (WAL.md, "Batches"), all of
        // equal size (same-length subs): a 24-byte batch header, then the record, a 4-byte length, a
        // 4-byte CRC and the body; zeros after them.
        let batchSize = 24 + 8 + (Int(bytes[56]) << 24 | Int(bytes[57]) << 16 | Int(bytes[58]) << 8 | Int(bytes[59]))
        try #require(32 + 6 * batchSize <= bytes.count)
        #expect(bytes[(32 + 6 * batchSize)...].allSatisfy { $0 == 0 })
        let offset = 32 + 3 * batchSize
        bytes[offset + 24 + 12] ^= 0x55
        try Data(bytes).write(to: segment)

        daemon = try DaemonProcess(config: Self.config, directory: directory)
        #expect(try daemon.waitForExit() == 1)
        #expect(daemon.stderr.contains("\(segment.path) is corrupt at offset \(offset)"))
        #expect(daemon.stderr.contains("--repair"))

        let repair = try DaemonProcess(config: Self.config, arguments: ["--repair"], directory: directory)
        #expect(try repair.waitForExit() == 0)
        #expect(repair.stderr.contains("3 records lost"))
        let cut = try FileManager.default.contentsOfDirectory(atPath: directory.appendingPathComponent("state/wal").path)
            .filter { $0.hasPrefix("cut-") }
        #expect(cut.count == 1)

        daemon = try DaemonProcess(config: Self.config, directory: directory)
        try daemon.waitUntilReady()
        connection = try RawConnection(path: daemon.socketPath)
        for (n, token) in tokens.enumerated() {
            let code = try connection.call("session.get", ["session": token])["error"]?["code"]
            #expect(n < 3 ? code == nil : code == "session_not_found", "session \(n)")
        }
        #expect(try connection.result("session.create", ["sub": "after"])["session"] != nil)
        #expect(try daemon.terminate() == 0)
    }

    @Test("disk full: changes get storage_unavailable and do not happen, reads go on; once space is back, writes work without a restart")
    func diskFull() throws {
        let daemon = try DaemonProcess.start(config: Self.config)
        let connection = try RawConnection(path: daemon.socketPath)
        let kept = try #require(try connection.result("session.create", ["sub": "carol"])["session"])
        // One segment: the log's bytes are where its records end (zero-filled space follows them).
        let size = try #require(try connection.result("stats")["store"]?["wal_bytes"]?.intValue)

        // Cap keyholed's file size just past what the log holds: writing a record beyond that fails,
        // inside the file's zero-filled space or not.
        try setFileSizeLimit(of: daemon.pid, to: UInt(size + 64))
        let data: JSONValue = ["blob": .string(String(repeating: "y", count: 2000))]
        let refused = try connection.call("session.create", ["sub": "dave", "data": data])
        #expect(refused["error"]?["code"] == "storage_unavailable")
        #expect((refused["error"]?["retry_after_ms"]?.intValue ?? 0) > 0)
        // Refused at once while failing, and nothing half done: dave has no session and no user.
        #expect(try connection.errorCode("session.create", ["sub": "erin"]) == "storage_unavailable")
        #expect(try connection.errorCode("user.get", ["sub": "dave"]) == "user_not_found")
        #expect(try connection.result("session.get", ["session": kept])["sub"] == "carol")
        let failing = try connection.result("stats")["store"]
        #expect(failing?["failing"] == true)
        #expect(failing?["failure"]?.stringValue?.contains("File too large") == true)

        try setFileSizeLimit(of: daemon.pid, to: nil)
        // keyholed probes the disk by itself; once it says the store recovered, writes work at once.
        try daemon.waitForStderr(containing: "storage.recovered")
        let outcome = try connection.call("session.create", ["sub": "dave", "data": data])
        #expect(outcome["ok"] == true)
        let recovered = try connection.result("stats")["store"]
        #expect(recovered?["failing"] == false)
        #expect(recovered?["failures"] == 1)
        #expect(try daemon.terminate() == 0)
        let stderr = daemon.stderr
        #expect(stderr.components(separatedBy: "storage.failed").count == 2, "the failure is logged once")
        #expect(stderr.contains("storage.recovered"))
    }
}
