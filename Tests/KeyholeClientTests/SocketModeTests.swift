import Foundation
import KeyholeClient
import KeyholeServer
import Testing

/// The socket file's mode comes from the umask at bind(2), and the umask is process-wide: servers
/// started together in one process must each get their own mode and leave the umask as it was.
@Suite("Socket file mode")
struct SocketModeTests {
    /// The process umask, read without changing it (umask(2) can only be read by setting it).
    static func processUmask() throws -> String {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        return try #require(status.split(separator: "\n").first { $0.hasPrefix("Umask:") }).description
    }

    @Test("eight servers bound at once: each socket has the mode it asked for, the umask is unchanged")
    func concurrentBinds() async throws {
        let before = try Self.processUmask()
        let modes: [UInt32] = [0o600, 0o660, 0o600, 0o666, 0o660, 0o600, 0o640, 0o660]
        let seen = try await withThrowingTaskGroup(of: (UInt32, UInt32).self) { tasks in
            for mode in modes {
                tasks.addTask {
                    var found: UInt32 = 0
                    let configure: (inout KeyholeServer.Configuration) -> Void = { configuration in
                        if case .path(let path, _) = configuration.listener { configuration.listener = .path(path, mode: mode) }
                    }
                    try await withServer(configure: configure) { path in
                        let attributes = try FileManager.default.attributesOfItem(atPath: path)
                        found = (attributes[.posixPermissions] as? NSNumber)?.uint32Value ?? 0
                        // A server that answers was bound and adopted by NIO as a listening socket.
                        let client = try await KeyholeClient.connect(socketPath: path)
                        _ = try await client.call("ping")
                        try await client.close()
                    }
                    return (mode, found)
                }
            }
            return try await tasks.reduce(into: []) { $0.append($1) }
        }
        #expect(seen.count == modes.count)
        for (asked, found) in seen { #expect(found == asked, "asked \(String(asked, radix: 8)), got \(String(found, radix: 8))") }
        #expect(try Self.processUmask() == before)
    }
}
