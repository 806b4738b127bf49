import ArgumentParser
import KeyholeProtocol

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

struct Jwks: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show or refresh the issuers' key sets.",
        subcommands: [Status.self, Refresh.self]
    )

    struct Status: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show each issuer's key set: key IDs, age, errors.")

        @OptionGroup var options: Jwks.Options

        func run() async throws {
            guard let result = try await options.call("jwks.status") else { return }
            if options.json {
                Swift.print(JSONValue.object(result).jsonText)
                return
            }
            for entry in result["issuers"]?.arrayValue ?? [] { Jwks.print(entry) }
        }
    }

    struct Refresh: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Fetch the issuers' key sets now.",
            discussion: """
                At most one such fetch per issuer per refetch cool-down ([jwks] refetch_cooldown, 30 s by \
                default), shared with fetches caused by unknown key IDs. Exit status 1 when a fetch failed \
                or was refused by the cool-down.
                """
        )

        @OptionGroup var options: Jwks.Options

        func run() async throws {
            guard let result = try await options.call("jwks.refresh") else { return }
            let entries = result["issuers"]?.arrayValue ?? []
            if options.json {
                Swift.print(JSONValue.object(result).jsonText)
            } else {
                for entry in entries {
                    let outcome = entry["outcome"]?.stringValue ?? "?"
                    var line = "\(entry["issuer"]?.stringValue ?? "?"): \(outcome.replacingUnderscores)"
                    if let error = entry["error"]?.stringValue { line += ": \(error)" }
                    if let wait = entry["retry_after_ms"]?.intValue { line += " (retry in \(Output.duration(ms: wait)))" }
                    Swift.print(line)
                }
            }
            if entries.contains(where: { ["failed", "rate_limited"].contains($0["outcome"]?.stringValue ?? "") }) {
                throw ExitCode(1)
            }
        }
    }

    /// What both subcommands take.
    struct Options: ParsableArguments {
        @OptionGroup var connection: ConnectionOptions

        @Option(help: "Only this configured issuer.")
        var issuer: String?

        @Flag(help: "Print the result as JSON.")
        var json = false

        /// Calls `op` with the issuer argument, if any.
        func call(_ op: String) async throws -> [String: JSONValue]? {
            var result: [String: JSONValue]?
            let args: [String: JSONValue] = issuer.map { ["issuer": .string($0)] } ?? [:]
            try await connection.withClient { client in result = try await client.call(op, args: args) }
            return result
        }
    }

    /// One issuer's status, as aligned rows.
    static func print(_ entry: JSONValue) {
        let now = Double(time(nil))
        var rows: [(String, String)] = []
        let kids = entry["kids"]?.arrayValue?.compactMap(\.stringValue) ?? []
        rows.append(("keys", "\(Output.number(entry["keys"]))" + (kids.isEmpty ? "" : " (\(kids.joined(separator: ", ")))")))
        rows.append(("usable", entry["usable"]?.boolValue == true ? "yes" : "no"))
        rows.append(("fetched", moment(entry["fetched_at"], now: now)))
        rows.append(("expires", moment(entry["expires_at"], now: now)))
        rows.append(("next fetch", moment(entry["next_fetch_at"], now: now)))
        rows.append(("fetches", "\(Output.number(entry["fetches"])) (\(Output.number(entry["failures"])) failed)"))
        if let fetching = entry["fetching"]?.stringValue { rows.append(("fetching now", fetching)) }
        rows.append(("last error", entry["last_error"]?.stringValue ?? "-"))
        Swift.print("\(entry["issuer"]?.stringValue ?? "?")  \(entry["source"]?.stringValue ?? "")")
        let width = rows.map(\.0.count).max() ?? 0
        for (name, value) in rows {
            Swift.print("  " + name + String(repeating: " ", count: width - name.count + 2) + value)
        }
    }

    /// "2026-11-21 19:53:29 UTC (5m 3s ago)", or "-".
    private static func moment(_ value: JSONValue?, now: Double) -> String {
        let seconds: Double
        switch value {
        case .double(let value)?: seconds = value
        case .int(let value)?: seconds = Double(value)
        default: return "-"
        }
        var clock = time_t(seconds)
        var parts = tm()
        gmtime_r(&clock, &parts)
        func two(_ value: Int32) -> String { value < 10 ? "0\(value)" : "\(value)" }
        let date = "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))"
        let time = "\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))"
        let offset = Int64(((seconds - now) * 1000).rounded())
        let relative = offset >= 0 ? "in \(Output.duration(ms: offset))" : "\(Output.duration(ms: -offset)) ago"
        return "\(date) \(time) UTC (\(relative))"
    }
}

extension String {
    fileprivate var replacingUnderscores: String { String(map { $0 == "_" ? " " : $0 }) }
}
