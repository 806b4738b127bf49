import ArgumentParser
import KeyholeProtocol

struct Stats: AsyncParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Show keyholed's counters.")

    @OptionGroup var connection: ConnectionOptions

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() async throws {
        try await connection.withClient { client in
            let stats = try await client.stats()
            if json {
                print(JSONValue.object(stats).jsonText)
                return
            }
            var rows: [(String, String)] = []
            rows.append(("uptime", Output.duration(ms: stats["uptime_ms"]?.intValue ?? 0)))
            if let connections = stats["connections"] {
                rows.append(("connections open", Output.number(connections["open"])))
                rows.append(("connections total", Output.number(connections["total"])))
                rows.append(("connections rejected", Output.number(connections["rejected"])))
                if let slow = connections["slow_readers"] { rows.append(("slow readers closed", Output.number(slow))) }
            }
            rows.append(("requests waiting", Output.number(stats["in_flight"])))
            rows.append(("bytes in", Output.number(stats["bytes"]?["in"])))
            rows.append(("bytes out", Output.number(stats["bytes"]?["out"])))
            if let store = stats["store"] {
                rows.append(("storage", store["failing"] == .bool(true) ? "failing" : "ok"))
                for (key, name) in [("sessions", "sessions"), ("users", "users"), ("wal_bytes", "wal bytes"),
                    ("records", "records written"), ("syncs", "syncs"), ("snapshots", "snapshots"), ("failures", "storage failures")] {
                    rows.append((name, Output.number(store[key])))
                }
                if case .double(let perSync)? = store["records_per_sync"] {
                    rows.append(("records per sync", String(Double(Int(perSync * 100)) / 100)))
                } else if let perSync = store["records_per_sync"]?.intValue {
                    rows.append(("records per sync", String(perSync)))
                }
            }
            for (op, count) in (stats["requests"]?.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
                rows.append(("requests \(op)", Output.number(count)))
            }
            for (code, count) in (stats["errors"]?.objectValue ?? [:]).sorted(by: { $0.key < $1.key }) {
                rows.append(("errors \(code)", Output.number(count)))
            }
            let width = rows.map(\.0.count).max() ?? 0
            for (name, value) in rows {
                print(name + String(repeating: " ", count: width - name.count + 2) + value)
            }
        }
    }
}
