import Foundation
import KeyholeTestSupport
import Testing

@testable import keyholed

/// The state directory holds every user's record: keyholed makes it owner-only and refuses one that
/// lets other users in.
@Suite("state directory", .serialized, .ownThreads)
struct StateDirectoryTests {
    @Test("missing directories are made 0700, parents included")
    func makes() throws {
        let top = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: top) }
        let path = top.appendingPathComponent("a/b/state").path
        try StateDirectory.prepare(path)
        for directory in ["a", "a/b", "a/b/state"] {
            let attributes = try FileManager.default.attributesOfItem(atPath: top.appendingPathComponent(directory).path)
            #expect(attributes[.posixPermissions] as? Int == 0o700, "\(directory)")
        }
        // An existing, correct one is taken as it is.
        try StateDirectory.prepare(path)
    }

    @Test("an existing directory that other users may use, or its group write, or another user owns, is refused as a configuration error",
        arguments: [(0o777, true), (0o770, true), (0o701, true), (0o750, false), (0o700, false)])
    func modes(mode: Int, refused: Bool) throws {
        let top = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: top) }
        let path = top.appendingPathComponent("state").path
        #expect(mkdir(path, 0o700) == 0 && chmod(path, mode_t(mode)) == 0)
        do {
            try StateDirectory.prepare(path)
            #expect(!refused, "mode 0\(String(mode, radix: 8)) was accepted")
        } catch {
            #expect(refused, "\(error)")
            #expect(error.isConfiguration && error.description.contains("has mode 0\(String(mode, radix: 8))"))
        }
    }

    @Test("keyholed exits 78 naming the problem: a state directory owned by another user")
    func foreignOwner() throws {
        let directory = try DaemonProcess.makeDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let state = directory.appendingPathComponent("state").path
        #expect(mkdir(state, 0o700) == 0 && chown(state, 33, 33) == 0)
        let daemon = try DaemonProcess(directory: directory)
        #expect(try daemon.waitForExit() == 78)
        #expect(daemon.stderr.contains("is owned by uid 33, not by keyholed's user"), "\(daemon.stderr)")
    }

    @Test("the parent of a path", arguments: [
        ("/var/lib/keyhole", "/var/lib"), ("/var/lib/keyhole/", "/var/lib"), ("/keyhole", "/"), ("state", "."), ("a/b", "a"),
    ])
    func parents(path: String, parent: String) {
        #expect(StateDirectory.parent(of: path) == parent)
    }
}
