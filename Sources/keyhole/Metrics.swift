import ArgumentParser
import KeyholeProtocol

/// `keyhole metrics`: the text /metrics serves, for node_exporter's textfile collector (write it to a
/// temporary file and rename it into the collector's directory, as node_exporter asks).
struct Metrics: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Print keyholed's metrics in Prometheus's text format (stats with format prometheus; needs the admin group).")

    @OptionGroup var connection: ConnectionOptions

    func run() async throws {
        try await connection.withClient { client in
            let result = try await client.call("stats", args: ["format": "prometheus"])
            guard case .string(let text)? = result["prometheus"] else {
                throw ValidationError("keyholed answered stats without a 'prometheus' member")
            }
            print(text, terminator: text.hasSuffix("\n") ? "" : "\n")
        }
    }
}
