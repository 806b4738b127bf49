import KeyholeClient
import KeyholeProtocol
import KeyholeServer
import NIOCore
import Testing

@Suite("Access policy on a live server")
struct AccessTests {
    static func peer(_ credentials: PeerCredentials?) -> @Sendable () -> PeerCredentials? {
        { credentials }
    }

    static func code(_ call: () async throws -> Void) async -> String? {
        do {
            try await call()
            return nil
        } catch let error as ProtocolError {
            return error.code.rawValue
        } catch {
            return "\(error)"
        }
    }

    @Test("a reload's rules apply to an open connection from its next request; ping is always allowed")
    func reloadTightensOpenConnection() async throws {
        let operator_ = PeerCredentials(pid: 42, uid: 5000, gid: 5000, groups: [4242])
        try await withServer(configure: { configuration in
            configuration.credentialSource = Self.peer(operator_)
            configuration.access = AccessPolicy(rules: [.init(groups: [4242], allow: .init(.admin))], serverUser: 4999)
        }) { path, server in
            let client = try await KeyholeClient.connect(socketPath: path)
            #expect(await Self.code { _ = try await client.call("stats") } == nil)
            #expect(await Self.code { _ = try await client.call("debug.echo", args: ["x": 1]) } == nil)
            server.applyAccess(rules: [.init(users: [5000], allow: .init(.verify))])
            #expect(await Self.code { _ = try await client.call("stats") } == "permission_denied")
            #expect(await Self.code { _ = try await client.ping() } == nil)
            // Back to the default: the socket's group (this process's) is not the peer's.
            server.applyAccess(rules: nil)
            #expect(server.accessPolicy.socketGroup != nil)
            #expect(await Self.code { _ = try await client.call("stats") } == "permission_denied")
            try await client.close()
        }
    }

    @Test("a peer whose credentials are unknown may only ping; the refusal names the operation's group")
    func unknownPeer() async throws {
        try await withServer(configure: { configuration in
            configuration.credentialSource = Self.peer(nil)
        }) { path, _ in
            let client = try await KeyholeClient.connect(socketPath: path)
            do {
                _ = try await client.call("stats")
                Issue.record("stats answered for an unknown peer")
            } catch let error as ProtocolError {
                #expect(error.code == .permissionDenied)
                #expect(error.message.contains("'stats' is in operation group 'admin'"), "\(error.message)")
            }
            #expect(await Self.code { _ = try await client.ping() } == nil)
            try await client.close()
        }
    }
}
