import ArgumentParser
import FoundationEssentials
import KeyholeClient
import KeyholeProtocol

/// One export or import over a file: skips what the output already has, appends each answer as it
/// comes, reports progress on stderr.
struct TransferRun {
    /// What keyholed answered for one item.
    struct Answer {
        /// The output's second column.
        var value: String?
        /// import: the user had no record under the transfer_sub here, so nothing moved.
        var unmoved = false
    }

    let connection: ConnectionOptions
    let input: String
    let output: String
    let name: String
    /// Which tab-separated column of an input line is the item (import takes export's output as is).
    var column = 0

    /// Errors that every further item would get too: stop, so the run can be resumed later.
    static let stopping: Set<String> = ["not_configured", "upstream_unavailable", "permission_denied", "shutting_down", "storage_unavailable"]
    /// Apple's refusals of the client or the grant rather than of one item: they stop the run too.
    static let stoppingAppleErrors: Set<String> = ["invalid_client", "unauthorized_client", "invalid_scope", "unsupported_grant_type"]

    func run(_ call: @escaping (KeyholeClient, String) async throws -> Answer) async throws {
        var seen = Set<ExactString>()
        let items = try Self.lines(of: input).map { line in
            let fields = line.split(separator: "\t", omittingEmptySubsequences: false)
            return fields.count > column ? String(fields[column].trimmingBlanks()) : ""
        }.filter { !$0.isEmpty && seen.insert(ExactString($0)).inserted }
        let file: TransferOutput
        do {
            file = try TransferOutput(path: output)
        } catch {
            Output.error("keyhole: \(error.message)")
            throw ExitCode(error.exitCode)
        }
        if file.cutPartialLine { Output.error("keyhole: cut an incomplete last line from \(output), left by an interrupted run") }
        let pending = items.filter { !file.done.contains(ExactString($0)) }
        var tally = Tally(total: pending.count, skipped: items.count - pending.count)
        var stopped = false
        try await connection.withClient { client in
            for item in pending {
                do {
                    let answer = try await call(client, item)
                    guard let value = answer.value, !value.isEmpty else { throw ProtocolError.internal("the answer has no result") }
                    // A line per item, two columns: an answer that could break that is not written.
                    guard Self.isPlain(value) else {
                        throw ProtocolError.internal("the answer contains whitespace or control characters; not written")
                    }
                    do throws(TransferOutput.Failure) {
                        try file.append(item, value)
                    } catch {
                        Output.error("keyhole: \(error.message)")
                        throw ExitCode(error.exitCode)
                    }
                    tally.completed += 1
                    if answer.unmoved { tally.unmoved += 1 }
                } catch let error as ProtocolError {
                    tally.failed += 1
                    Output.error("keyhole: \(item): \(error.code): \(error.message)")
                    if Self.stopping.contains(error.code.rawValue)
                        || (error.code == .upstreamRejected && Self.stoppingAppleErrors.contains(error.appleError ?? ""))
                    {
                        stopped = true
                        break
                    }
                }
                if (tally.completed + tally.failed) % 100 == 0 { progress(tally) }
            }
        }
        progress(tally)
        if stopped { Output.error("keyhole: \(name) stopped; run the same command again to go on") }
        if tally.failed > 0 { throw ExitCode(1) }
    }

    private struct Tally {
        let total: Int
        let skipped: Int
        var completed = 0
        var failed = 0
        var unmoved = 0
    }

    private func progress(_ tally: Tally) {
        let unmoved = name == "import" ? ", \(tally.unmoved) with no record here to move" : ""
        Output.error(
            "keyhole: \(name): \(tally.completed + tally.failed)/\(tally.total) tried, \(tally.completed) done, \(tally.failed) failed, \(tally.skipped) already in \(output)\(unmoved)"
        )
    }

    /// No whitespace, no control characters: Apple's identifiers are printable ASCII.
    static func isPlain(_ value: String) -> Bool {
        value.utf8.allSatisfy { $0 > 0x20 && $0 != 0x7F }
    }

    /// The file's lines, without blanks and # comments.
    static func lines(of path: String) throws -> [String] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            Output.error("keyhole: cannot read \(path) as UTF-8 text")
            throw ExitCode(64)
        }
        return text.split(whereSeparator: \.isNewline).map { String($0.trimmingBlanks()) }
            .filter { !$0.isEmpty && !$0.hasPrefix("#") }
    }
}

extension Substring {
    /// Without the blanks at either end (the lines are already split at line ends): Foundation's
    /// trimming would pull in its internationalisation data, some 30 MB of the binary, for this alone.
    fileprivate func trimmingBlanks() -> Substring {
        var text = self
        while let first = text.first, first.isWhitespace { text.removeFirst() }
        while let last = text.last, last.isWhitespace { text.removeLast() }
        return text
    }
}
