import ArgumentParser
import FoundationEssentials
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
            Each line of output is written and synced as soon as Apple answers: run the same command \
            again after an interruption or failures and it goes on with what is not in the output yet \
            (an incomplete last line, from a crash, is cut first). Two runs never write one output: \
            the second refuses to start. import counts the users that had no record under their \
            transfer_sub here (nothing to move: their first sign-in creates them); they are in the \
            output all the same. A run stops at the first error that every further item would get too \
            (Apple unreachable, the client refused by Apple, keyholed not configured) and exits 1 when \
            any item failed.
            """,
        subcommands: [Export.self, Import.self])

    struct Export: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Get each user's transfer identifier for the receiving team.")

        @OptionGroup var connection: ConnectionOptions
        @Option(name: .customLong("target"), help: "The receiving team's id (10 characters).") var target: String
        @Option(name: .customLong("client-id"), help: "The app's primary App ID, when several are configured.") var clientID: String?
        @Argument(help: "A file of subs, one per line.") var input: String
        @Option(name: .customLong("output"), help: "Where `sub<TAB>transfer_sub` lines go (appended).") var output: String

        func validate() throws {
            // Caught here, not by every item in turn.
            guard target.utf8.count == 10, target.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x41...0x5A).contains($0) }) else {
                throw ValidationError("--target must be a team id: 10 upper-case letters and digits")
            }
        }

        func run() async throws {
            try await TransferRun(connection: connection, input: input, output: output, name: "export").run { client, sub in
                var args: [String: JSONValue] = ["sub": .string(sub), "target_team_id": .string(target)]
                if let clientID { args["client_id"] = .string(clientID) }
                return TransferRun.Answer(value: try await client.call("apple.transfer.export", args: args)["transfer_sub"]?.stringValue)
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
                let result = try await client.call("apple.transfer.import", args: args)
                return TransferRun.Answer(value: result["sub"]?.stringValue, unmoved: result["moved"] == false)
            }
        }
    }
}
