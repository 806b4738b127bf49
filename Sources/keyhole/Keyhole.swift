import ArgumentParser
import KeyholeClient
import KeyholeProtocol

/// keyhole: the command-line client of keyholed.
@main
struct Keyhole: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keyhole",
        abstract: "Talk to keyholed, Keyhole's local authentication daemon.",
        discussion: """
            Exit status: 0 on success, 1 when keyholed answers with an error (its code and message are \
            printed on stderr), 2 when keyholed cannot be reached, 64 on a usage error.
            """,
        version: KeyholeVersion.current,
        subcommands: [Ping.self, Stats.self, Metrics.self, Call.self, VerifyToken.self, Jwks.self, Session.self, User.self, Snapshot.self, Reload.self, Keygen.self, Apple.self]
    )
}

/// Options every subcommand shares.
struct ConnectionOptions: ParsableArguments {
    @Option(help: ArgumentHelp(
        "keyholed's socket.",
        discussion: "Default: $KEYHOLE_SOCKET, else \(KeyholeVersion.defaultSocketPath)."))
    var socket: String?

    var socketPath: String {
        socket ?? Environment.value("KEYHOLE_SOCKET") ?? KeyholeVersion.defaultSocketPath
    }

    /// Runs `body` with a connected client, mapping failures to the documented exit statuses.
    func withClient(_ body: (KeyholeClient) async throws -> Void) async throws {
        let client: KeyholeClient
        do {
            client = try await KeyholeClient.connect(socketPath: socketPath)
        } catch {
            Output.error("keyhole: \(error)")
            throw ExitCode(2)
        }
        let outcome: Result<Void, any Error>
        do {
            try await body(client)
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        try? await client.close()
        switch outcome {
        case .success:
            return
        case .failure(let error as ProtocolError):
            Output.error("keyhole: \(error.code): \(error.message)")
            throw ExitCode(1)
        case .failure(let error as KeyholeClientError):
            Output.error("keyhole: \(error)")
            throw ExitCode(2)
        case .failure(let error):
            throw error
        }
    }
}
