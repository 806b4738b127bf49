import Foundation
#if canImport(Glibc)
import Glibc
#endif
import KeyholeProtocol
import KeyholeTestSupport
import Testing

/// Team transfer through two keyholeds (the sending team's and the receiving team's) against a fake
/// Apple: export of transfer identifiers, import moving the records kept under them, and the first
/// sign-in of a transferred user recognised by its transfer_sub.
@Suite("Apple team transfer, end to end", .serialized, .ownThreads)
struct AppleTransferEndToEndTests {
    typealias SignIn = AppleSignInEndToEndTests

    @Test("export on the sending side, import on the receiving side: the record and its sessions move to the new sub")
    func bothWays() async throws {
        let apple = try await FakeApple()
        let (sender, sending) = try SignIn.start(apple)
        let (receiver, receiving) = try SignIn.start(apple)
        let sub = "001.tr.a"
        _ = try AppleDeletionEndToEndTests.signIn(apple, sending, sub: sub)
        let exported = try sending.result("apple.transfer.export", ["sub": .string(sub), "target_team_id": .string(apple.teamID), "client_id": .string(SignIn.web)])
        let transferSub = try #require(exported["transfer_sub"]?.stringValue)
        #expect(apple.transfers[transferSub] == sub)

        // The receiving team loaded the user's data under the transfer identifier.
        _ = try receiving.result("user.update", ["sub": .string(transferSub), "name": ["given": "Jane"]])
        let session = try #require(try receiving.result("session.create", ["sub": .string(transferSub)])["session"]?.stringValue)
        let imported = try receiving.result("apple.transfer.import", ["transfer_sub": .string(transferSub), "client_id": .string(SignIn.web)])
        let newSub = FakeApple.transferredSub(sub)
        #expect(imported["sub"] == .string(newSub))
        #expect(imported["moved"] == true && imported["sessions_moved"] == 1)
        #expect(imported["is_private_email"] == true)
        let user = try receiving.result("user.get", ["sub": .string(newSub)])
        #expect(user["name"] == ["given": "Jane"])
        #expect(user["email"] == imported["email"])
        #expect(try receiving.errorCode("user.get", ["sub": .string(transferSub)]) == "user_not_found")
        #expect(try receiving.result("session.get", ["session": .string(session)])["sub"] == .string(newSub))
        // Importing again finds nothing left to move.
        #expect(try receiving.result("apple.transfer.import", ["transfer_sub": .string(transferSub), "client_id": .string(SignIn.web)])["moved"] == false)

        // Refusals: an unknown identifier is Apple's invalid_grant; a malformed team id never leaves.
        #expect(try receiving.errorCode("apple.transfer.import", ["transfer_sub": "t.unknown", "client_id": .string(SignIn.web)]) == "upstream_rejected")
        #expect(try sending.errorCode("apple.transfer.export", ["sub": .string(sub), "target_team_id": "team"]) == "bad_request")
        #expect(try sending.errorCode("apple.transfer.export", ["sub": .string(sub), "target_team_id": .string(apple.teamID), "client_id": "com.other"]) == "bad_request")
        #expect(try sender.terminate() == 0)
        #expect(try receiver.terminate() == 0)
        try await apple.close()
    }

    @Test("a sign-in whose identity token carries transfer_sub takes over the record kept under it")
    func signInWithTransferSub() async throws {
        let apple = try await FakeApple()
        let (daemon, connection) = try SignIn.start(apple)
        _ = try connection.result("user.update", ["sub": "t.kept", "name": ["given": "Ada", "family": "King"]])
        let token = apple.identityToken(sub: "002.tr.b", audience: SignIn.app, extra: ["transfer_sub": "t.kept"])
        let signedIn = try connection.result("apple.sign_in", ["identity_token": .string(token)])
        #expect(signedIn["created"] == false)
        #expect(signedIn["user"]?["name"] == ["given": "Ada", "family": "King"])
        #expect(signedIn["user"]?["sub"] == "002.tr.b")
        #expect(try connection.errorCode("user.get", ["sub": "t.kept"]) == "user_not_found")
        #expect(try daemon.terminate() == 0)
        try await apple.close()
    }

    @Test("keyhole apple transfer export|import over files: resumes where it stopped, stops when Apple is down, goes on past a refused item")
    func commandLine() async throws {
        let apple = try await FakeApple()
        let (sender, sending) = try SignIn.start(apple)
        let (receiver, _) = try SignIn.start(apple)
        let cli = ChildProcess.builtProduct("keyhole").path
        let subs = ["001.cli.a", "001.cli.b", "001.cli.c"]
        for sub in subs { _ = try AppleDeletionEndToEndTests.signIn(apple, sending, sub: sub) }
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("subs.txt").path
        let exported = directory.appendingPathComponent("exported.tsv").path
        try "# subs to move\n\(subs[0])\n\n\(subs[1])\n\(subs[2])\n".write(toFile: input, atomically: true, encoding: .utf8)
        // An earlier run got as far as the first.
        try "\(subs[0])\tt.earlier\n".write(toFile: exported, atomically: true, encoding: .utf8)
        let export = [cli, "apple", "transfer", "export", "--socket", sender.socketPath, "--target", apple.teamID,
                      "--client-id", SignIn.web, input, "--output", exported]

        apple.fail(with: .serviceUnavailable)
        let down = try ChildProcess.run(export)
        #expect(down.status == 1)
        #expect(down.stderr.contains("upstream_unavailable") && down.stderr.contains("stopped"))
        #expect(try String(contentsOfFile: exported, encoding: .utf8) == "\(subs[0])\tt.earlier\n")

        apple.recover()
        let again = try ChildProcess.run(export)
        #expect(again.status == 0, "\(again.stderr)")
        #expect(again.stderr.contains("2 done, 0 failed, 1 already in"))
        let lines = try String(contentsOfFile: exported, encoding: .utf8).split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
        #expect(lines.map { $0[0] } == subs)
        for line in lines.dropFirst() { #expect(apple.transfers[line[1]] == line[0]) }
        #expect(!apple.transfers.values.contains(subs[0]))

        // The receiving side takes export's output as it is; the earlier run's identifier is refused
        // by Apple, and the others still go through.
        let imported = directory.appendingPathComponent("imported.tsv").path
        let run = try ChildProcess.run([cli, "apple", "transfer", "import", "--socket", receiver.socketPath, "--client-id", SignIn.web, exported, "--output", imported])
        #expect(run.status == 1)
        #expect(run.stderr.contains("t.earlier: upstream_rejected"))
        // Nothing was kept under the identifiers on this side: the users are mapped, not moved.
        #expect(run.stderr.contains("2 done, 1 failed, 0 already in \(imported), 2 with no record here to move"))
        let moved = try String(contentsOfFile: imported, encoding: .utf8).split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
        #expect(moved.map { $0[1] } == subs.dropFirst().map(FakeApple.transferredSub))
        #expect(moved.map { $0[0] } == lines.dropFirst().map { $0[1] })
        #expect(try sender.terminate() == 0)
        #expect(try receiver.terminate() == 0)
        try await apple.close()
    }

    @Test("keyhole apple transfer's output: an interrupted line is cut, a second run on it is refused, a refused client stops the run")
    func commandLineOutput() async throws {
        let apple = try await FakeApple()
        let (sender, _) = try SignIn.start(apple)
        let cli = ChildProcess.builtProduct("keyhole").path
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = directory.appendingPathComponent("subs.txt").path
        let exported = directory.appendingPathComponent("exported.tsv").path
        let subs = ["001.out.a", "001.out.b", "001.out.c"]
        try (subs.joined(separator: "\n") + "\n").write(toFile: input, atomically: true, encoding: .utf8)
        // An earlier run was cut off in the middle of its second line.
        try "\(subs[0])\tt.earlier\n\(subs[1])\tt.par".write(toFile: exported, atomically: true, encoding: .utf8)
        let export = [cli, "apple", "transfer", "export", "--socket", sender.socketPath, "--target", apple.teamID,
                      "--client-id", SignIn.web, input, "--output", exported]

        // Another run holds the output. Close-on-exec: a child another test spawns meanwhile would
        // otherwise inherit the descriptor, and with it the lock, past close(held) (seen in a full run).
        let held = open(exported, O_RDWR | O_CLOEXEC)
        #expect(flock(held, LOCK_EX) == 0)
        let busy = try ChildProcess.run(export)
        close(held)
        #expect(busy.status == 75)
        #expect(busy.stderr.contains("being written by another run"))
        #expect(apple.requestPaths.allSatisfy { $0.hasPrefix("/auth/keys") })

        // Apple refuses the client: the first item says why and the run stops there.
        apple.refuseAll(with: "invalid_client")
        let refused = try ChildProcess.run(export)
        #expect(refused.status == 1)
        #expect(refused.stderr.contains("cut an incomplete last line"))
        #expect(refused.stderr.contains("\(subs[1]): upstream_rejected") && refused.stderr.contains("stopped"))
        #expect(refused.stderr.contains("1/2 tried"))
        #expect(try String(contentsOfFile: exported, encoding: .utf8) == "\(subs[0])\tt.earlier\n")

        apple.recover()
        let done = try ChildProcess.run(export)
        #expect(done.status == 0, "\(done.stderr)")
        #expect(!done.stderr.contains("cut an incomplete"))
        let lines = try String(contentsOfFile: exported, encoding: .utf8).split(separator: "\n").map { $0.split(separator: "\t").map(String.init) }
        #expect(lines.map { $0[0] } == subs)
        #expect(lines.allSatisfy { $0.count == 2 })

        // A malformed team id is caught before anything is asked.
        let asked = apple.tokenRequests.count
        let badTarget = try ChildProcess.run(export.map { $0 == apple.teamID ? "team" : $0 })
        #expect(badTarget.status == 64)
        #expect(badTarget.stderr.contains("--target must be a team id: 10 upper-case letters and digits"), "\(badTarget.stderr)")
        #expect(apple.tokenRequests.count == asked)
        #expect(try sender.terminate() == 0)
        try await apple.close()
    }
}
