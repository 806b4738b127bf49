import ArgumentParser
import KeyholeProtocol

struct Ping: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Check that keyholed answers, and how fast.")

    @OptionGroup var connection: ConnectionOptions

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() async throws {
        try await connection.withClient { client in
            let clock = ContinuousClock()
            let start = clock.now
            let pong = try await client.ping()
            let elapsed = start.duration(to: clock.now)
            if json {
                print(JSONValue.object([
                    "protocol": .int(Int64(pong.protocolVersion)), "version": .string(pong.version),
                    "uptime_ms": .int(pong.uptimeMs),
                ]).jsonText)
            } else {
                let micros = elapsed.components.seconds * 1_000_000 + elapsed.components.attoseconds / 1_000_000_000_000
                print("keyholed \(pong.version) (protocol \(pong.protocolVersion)) at \(connection.socketPath): "
                    + "up \(Output.duration(ms: pong.uptimeMs)), answered in \(micros) µs")
            }
        }
    }
}
