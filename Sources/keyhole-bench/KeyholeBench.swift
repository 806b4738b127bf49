import ArgumentParser
import KeyholeProtocol

/// keyhole-bench: keyholed's benchmarks. Measure release builds only.
@main
struct KeyholeBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "keyhole-bench",
        abstract: "Benchmarks for keyholed (release builds only).",
        version: KeyholeVersion.current,
        subcommands: [Load.self, Verify.self, FloorServer.self, RawFloorServer.self, Hostile.self, MetricsCost.self, RefreshChecksCost.self],
        defaultSubcommand: Load.self
    )
}
