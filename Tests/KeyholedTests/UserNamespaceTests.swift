import Foundation
import KeyholeTestSupport
import Testing

@testable import keyholed

/// keyholed in a user namespace that does not map every id to itself (systemd's PrivateUsers=, a
/// container's map): peers outside the map read as the overflow uid 65534, so access control cannot
/// tell them apart. keyholed refuses to start there unless told to, and then treats them as unknown.
@Suite("user namespaces", .serialized, .ownThreads)
struct UserNamespaceTests {
    @Test("an id map counts as the identity only when it maps every id from 0 to 2^32 - 2 to itself", arguments: [
        ("         0          0 4294967295\n", true),
        ("0 0 4294967295", true),
        ("0 0 1000\n1000 1000 4294966295\n", true),
        ("1000 1000 4294966295\n0 0 1000\n", true),
        // systemd's PrivateUsers=yes: root and the service's user only.
        ("0 0 1\n998 998 1\n", false),
        ("0 0 65536\n", false),
        // A container's shifted map.
        ("0 100000 65536\n", false),
        ("0 0 1000\n1001 1001 4294966294\n", false),
        ("", false),
        ("0 0\n", false),
        ("zero 0 4294967295\n", false),
    ])
    func identityMaps(map: String, identity: Bool) {
        #expect(UserNamespace.mapsEveryIDToItself(map) == identity)
    }

    static let keyhole = ChildProcess.builtProduct("keyhole").path
    /// Runs keyholed in a new user namespace mapping only root to itself (as PrivateUsers= maps
    /// only root and the service's user).
    static let mapOnlyRoot = ["/usr/bin/unshare", "--user", "--map-root-user"]

    @Test("keyholed in a namespace that maps only root refuses to start (exit 78), saying why")
    func refused() throws {
        let daemon = try DaemonProcess(config: "", launcher: Self.mapOnlyRoot)
        #expect(try daemon.waitForExit() == 78)
        #expect(daemon.stderr.contains("does not map every uid to itself"), "\(daemon.stderr)")
        #expect(daemon.stderr.contains("allow_unmapped_peers"))
    }

    @Test("with allow_unmapped_peers it starts; a peer outside the map is unknown and may only ping, root still may do anything")
    func allowedButUnknown() async throws {
        let config = "[server]\nsocket_mode = \"0666\"\nallow_unmapped_peers = true\n"
        let daemon = try DaemonProcess(config: config, launcher: Self.mapOnlyRoot)
        try daemon.waitUntilReady()
        chmod(daemon.directory.path, 0o711)
        #expect(daemon.stderr.contains("starting anyway"))
        // www-data (uid 33) outside the namespace reads as 65534 inside it, whatever its groups.
        let asWebApp = ["/usr/bin/setpriv", "--reuid=33", "--regid=0", "--clear-groups", Self.keyhole, "call", "--socket", daemon.socketPath]
        let ping = try await ChildProcess.runOffPool(asWebApp + ["ping", "{}"])
        #expect(ping.status == 0 && ping.stdout.contains(#""ok":true"#), "\(ping.stdout)\(ping.stderr)")
        let create = try await ChildProcess.runOffPool(asWebApp + ["session.create", #"{"sub":"u1"}"#])
        let said = create.stdout + create.stderr
        #expect(said.contains("permission_denied") && said.contains("uid 65534 (the overflow uid"), "\(said)")
        // Root is mapped (to itself), so it is still known.
        let connection = try RawConnection(path: daemon.socketPath)
        #expect(try connection.result("session.create", ["sub": "u1"])["session"] != nil)
        #expect(try daemon.terminate() == 0)
    }
}
