import ArgumentParser
import Foundation
import KeyholeClient
import KeyholeProtocol

/// `keyhole apple ...`: Sign in with Apple administration.
struct Apple: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Sign in with Apple administration.",
        subcommands: [AppleTransfer.self])
}

/// `keyhole apple transfer export|import`: a team transfer over a file of users, resumable.
struct AppleTransfer: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "transfer",
        abstract: "Move Sign in with Apple users between developer teams (apple.transfer.export / .import).",
        discussion: """
            The sending team runs `export` over a file of subs (one per line) and hands the output, \
            `sub<TAB>transfer_sub` per line, to the receiving team, which loads its users under the \
            transfer_subs and, once Apple has moved the apps, runs `import` over the transfer_subs \
            (`transfer_sub<TAB>new sub` per line). Blank lines and lines starting with # are skipped. \
            Each line of output is written and flushed as soon as Apple answers: run the same command \
            again after an interruption or failures and it goes on with what is not in the output yet.
            """,
        subcommands: [Export.self, Import.self])

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Get each user's transfer identifier for the receiving team.")

        @OptionGroup var connection: ConnectionOptions
        @Option(name: .customLong("target"), help: "The receiving team's id (10 characters).") var target: String
        @Option(name: .customLong("client-id"), help: "The app's primary App ID, when several are configured.") var clientID: String?
        @Argument(help: "A file of subs, one per line.") var input: String
        @Option(name: .customLong("output"), help: "Where `sub<TAB>transfer_sub` lines go (appended).") var output: String

        func run() async throws {
            try await TransferRun(connection: connection, input: input, output: output, name: "export").run { client, sub in
                var args: [String: JSONValue] = ["sub": .string(sub), "target_team_id": .string(target)]
                if let clientID { args["client_id"] = .string(clientID) }
                return try await client.call("apple.transfer.export", args: args)["transfer_sub"]?.stringValue
            }
        }
    }

    struct Import: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Turn transfer identifiers into the users' new subs, moving their records.")

        @OptionGroup var connection: ConnectionOptions
        @Option(name: .customLong("client-id"), help: "The app's primary App ID, when several are configured.") var clientID: String?
        @Argument(help: "A file of transfer_subs, one per line (or export's output: its second column).") var input: String
        @Option(name: .customLong("output"), help: "Where `transfer_sub<TAB>sub` lines go (appended).") var output: String

        func run() async throws {
            try await TransferRun(connection: connection, input: input, output: output, name: "import", column: 1).run { client, transferSub in
                var args: [String: JSONValue] = ["transfer_sub": .string(transferSub)]
                if let clientID { args["client_id"] = .string(clientID) }
                return try await client.call("apple.transfer.import", args: args)["sub"]?.stringValue
            }
        }
    }
}

/// One export or import over a file: skips what the output already has, appends each answer as it
/// comes, reports progress on stderr.
struct TransferRun {
    let connection: ConnectionOptions
    let input: String
    let output: String
    let name: String
    /// Which tab-separated column of an input line is the item (import takes export's output as is).
    var column = 0

    /// Errors that every further item would get too: stop, so the run can be resumed later.
    static let stopping: Set<String> = ["not_configured", "upstream_unavailable", "permission_denied", "shutting_down", "storage_unavailable"]

    func run(_ call: @escaping (KeyholeClient, String) async throws -> String?) async throws {
        let items = try Self.lines(of: input).map { line in
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            return fields.count > column ? String(fields[column]) : ""
        }.filter { !$0.isEmpty }
        let done = Set(FileManager.default.fileExists(atPath: output)
            ? try Self.lines(of: output).compactMap { $0.split(separator: "\t").first.map(String.init) } : [])
        let pending = items.filter { !done.contains($0) }
        guard FileManager.default.fileExists(atPath: output) || FileManager.default.createFile(atPath: output, contents: nil, attributes: [.posixPermissions: 0o600]),
            let file = FileHandle(forWritingAtPath: output)
        else {
            Output.error("keyhole: cannot open \(output) for writing")
            throw ExitCode(1)
        }
        defer { try? file.close() }
        try file.seekToEnd()
        var completed = 0
        var failed = 0
        var stopped = false
        try await connection.withClient { client in
            for item in pending {
                do {
                    guard let result = try await call(client, item) else { throw ProtocolError.internal("the answer has no result") }
                    try file.write(contentsOf: Data("\(item)\t\(result)\n".utf8))
                    try file.synchronize()
                    completed += 1
                } catch let error as ProtocolError {
                    failed += 1
                    Output.error("keyhole: \(item): \(error.code): \(error.message)")
                    if Self.stopping.contains(error.code.rawValue) {
                        stopped = true
                        break
                    }
                }
                if (completed + failed) % 100 == 0 { progress(completed, failed, of: pending.count, skipped: items.count - pending.count) }
            }
        }
        progress(completed, failed, of: pending.count, skipped: items.count - pending.count)
        if stopped { Output.error("keyhole: \(name) stopped; run the same command again to go on") }
        if failed > 0 { throw ExitCode(1) }
    }

    private func progress(_ completed: Int, _ failed: Int, of total: Int, skipped: Int) {
        Output.error("keyhole: \(name): \(completed + failed)/\(total) tried, \(completed) done, \(failed) failed, \(skipped) already in \(output)")
    }

    /// The file's lines, without blanks and # comments.
    static func lines(of path: String) throws -> [String] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            Output.error("keyhole: cannot read \(path) as UTF-8 text")
            throw ExitCode(64)
        }
        return text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
    }
}
