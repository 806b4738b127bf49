import Foundation
import KeyholeProtocol
import NIOCore

/// A throwaway PostgreSQL cluster for one test (Scripts/pg_cluster.py): Debian's PostgreSQL in a
/// directory of its own under /tmp, its socket there, and with `tcp` a loopback port taking only
/// scram-sha-256 logins. Role `keyhole` owns database `keyhole`.
package final class PostgresCluster: Sendable {
    package let process: ScriptProcess
    /// The directory of the server's Unix socket.
    package let socketDirectory: String
    package let port: Int
    /// `127.0.0.1` with `tcp`, else `nil`.
    package let host: String?
    package let user: String
    package let password: String
    package let database: String
    private let replies: AsyncStream<JSONValue>

    /// The socket file a client connects to (`<directory>/.s.PGSQL.<port>`).
    package var socketPath: String { "\(socketDirectory)/.s.PGSQL.\(port)" }

    private init(process: ScriptProcess, info: JSONValue, replies: AsyncStream<JSONValue>) throws {
        guard let directory = info["socket_dir"]?.stringValue, let port = info["port"]?.intValue,
            let user = info["user"]?.stringValue, let password = info["password"]?.stringValue,
            let database = info["database"]?.stringValue
        else { throw RawConnection.Failure(description: "pg_cluster.py said \(info)") }
        self.process = process
        self.replies = replies
        (socketDirectory, self.port, self.user, self.password, self.database) = (directory, Int(port), user, password, database)
        host = info["host"]?.stringValue
    }

    /// Starts a cluster and waits until it accepts connections (pg_ctl -w).
    package static func start(tcp: Bool = false) async throws -> PostgresCluster {
        let process = try ScriptProcess.python(path: "Scripts/pg_cluster.py", tcp ? ["--tcp"] : [], stdin: true)
        let replies = process.jsonReplies()
        var iterator = replies.makeAsyncIterator()
        guard let info = await iterator.next(), info["socket_dir"] != nil else {
            process.closeInput()
            let (status, stderr) = await process.wait()
            throw RawConnection.Failure(description: "pg_cluster.py did not start (status \(status)): \(stderr)")
        }
        return try PostgresCluster(process: process, info: info, replies: replies)
    }

    /// Sends a command (`stop`, `crash`, `start`, `freeze`, `thaw`, `sql TEXT`, `pid`) and returns
    /// the script's answer; one that is not `{"ok": true, ...}` is thrown.
    @discardableResult
    package func command(_ line: String) async throws -> JSONValue {
        process.send(line)
        var iterator = replies.makeAsyncIterator()
        guard let answer = await iterator.next() else {
            throw RawConnection.Failure(description: "pg_cluster.py ended on '\(line.prefix(80))'")
        }
        guard answer["ok"] == true || answer["pid"] != nil else {
            throw RawConnection.Failure(description: "pg_cluster.py '\(line.prefix(80))': \(answer)")
        }
        return answer
    }

    /// `text` run by psql as the superuser on the database; psql's unaligned output.
    @discardableResult
    package func sql(_ text: String) async throws -> String {
        let single = text.split(whereSeparator: \.isNewline).joined(separator: " ")
        return try await command("sql \(single)")["out"]?.stringValue ?? ""
    }

    /// Stops the server and removes its directory: the script's exit status.
    package func close() async -> Int32 {
        process.closeInput()
        return await process.wait().status
    }
}
