import ArgumentParser
import KeyholeProtocol
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

struct Session: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Create, inspect, list and revoke sessions.",
        discussion: "Results are printed as JSON. A session token is a secret: pass it on standard input rather than on the command line, where other users can see it in the process list.",
        subcommands: [Create.self, Get.self, Revoke.self, List.self]
    )

    struct Create: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Create a session for a user; prints its token once.")

        @OptionGroup var principal: PrincipalOptions
        @Option(help: "Seconds until the session ends however much it is used (default: [sessions] ttl).")
        var ttl: Int?
        @Option(help: "Seconds it may go unused (default: [sessions] idle_timeout).")
        var idle: Int?
        @Option(help: "The caller's data: a JSON object.")
        var data: String?

        func run() async throws {
            var args = principal.args
            if let ttl { args["ttl_s"] = .int(Int64(ttl)) }
            if let idle { args["idle_s"] = .int(Int64(idle)) }
            if let data {
                guard let object = try? JSONValue.parse(ByteBuffer(string: data)), case .object = object else {
                    throw ValidationError("--data must be a JSON object")
                }
                args["data"] = object
            }
            try await principal.connection.print("session.create", args)
        }
    }

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show a live session and its user (marks it as used).")

        @OptionGroup var connection: ConnectionOptions
        @Argument(help: "The session token, or - (the default) to read it from standard input.")
        var token = "-"

        func run() async throws {
            try await connection.print("session.get", ["session": .string(try Session.secret(token))])
        }
    }

    struct Revoke: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Revoke a session by token or by id.")

        @OptionGroup var connection: ConnectionOptions
        @Option(help: "The session's id (as session list shows it) instead of its token.")
        var id: String?
        @Argument(help: "The session token, or - (the default) to read it from standard input.")
        var token = "-"

        func run() async throws {
            var args: [String: JSONValue]
            if let id { args = ["id": .string(id)] } else { args = ["session": .string(try Session.secret(token))] }
            try await connection.print("session.revoke", args)
        }
    }

    struct List: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "List a user's live sessions (ids, never tokens).")

        @OptionGroup var principal: PrincipalOptions

        func run() async throws {
            try await principal.connection.print("session.list", principal.args)
        }
    }

    /// `text`, or the first line of standard input for `-`.
    static func secret(_ text: String) throws -> String {
        guard text == "-" else { return text }
        guard let line = readLine(strippingNewline: true), !line.isEmpty else {
            throw ValidationError("no session token on standard input")
        }
        return String(line.filter { !$0.isWhitespace })
    }
}

struct User: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Show or delete a user's record.",
        subcommands: [Get.self, Delete.self]
    )

    struct Get: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Show a user's record.")

        @OptionGroup var principal: PrincipalOptions

        func run() async throws {
            try await principal.connection.print("user.get", principal.args)
        }
    }

    struct Delete: AsyncParsableCommand {
        static let configuration = CommandConfiguration(abstract: "Delete a user's record and every session of theirs.")

        @OptionGroup var principal: PrincipalOptions

        func run() async throws {
            try await principal.connection.print("user.delete", principal.args)
        }
    }
}

/// A user named by subject and, optionally, issuer.
struct PrincipalOptions: ParsableArguments {
    @OptionGroup var connection: ConnectionOptions
    @Argument(help: "The user's subject (sub).")
    var sub: String
    @Option(help: "The issuer's name (default: the only configured issuer, or local).")
    var issuer: String?

    var args: [String: JSONValue] {
        var args: [String: JSONValue] = ["sub": .string(sub)]
        if let issuer { args["issuer"] = .string(issuer) }
        return args
    }
}

extension ConnectionOptions {
    /// Calls `op` and prints its result as JSON.
    func print(_ op: String, _ args: [String: JSONValue]) async throws {
        try await withClient { client in
            let result = try await client.call(op, args: args)
            Swift.print(JSONValue.object(result).jsonText)
        }
    }
}
