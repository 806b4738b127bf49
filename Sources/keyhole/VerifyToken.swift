import ArgumentParser
import KeyholeProtocol

#if canImport(Glibc)
import Glibc
#endif

struct VerifyToken: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "verify",
        abstract: "Verify an identity token (JWT) against keyholed's issuers.",
        discussion: "Reads the token from the argument, or from standard input when it is '-' or absent."
    )

    @OptionGroup var connection: ConnectionOptions

    @Argument(help: "The token, or '-' for standard input.")
    var token: String?

    @Option(help: "The configured issuer to verify against (default: the one matching the token's iss).")
    var issuer: String?

    @Option(help: "The audience the token must be for; it must be configured for the issuer.")
    var audience: String?

    @Option(help: "The nonce the token must carry (raw, or as its SHA-256 hex).")
    var nonce: String?

    @Flag(help: "Print the result as JSON.")
    var json = false

    func run() async throws {
        let text = try (token == nil || token == "-" ? Self.standardInput() : token!).filter { !$0.isWhitespace }
        var args: [String: JSONValue] = ["token": .string(String(text))]
        if let issuer { args["issuer"] = .string(issuer) }
        if let audience { args["audience"] = .string(audience) }
        if let nonce { args["nonce"] = .string(nonce) }
        try await connection.withClient { client in
            let result = try await client.call("token.verify", args: args)
            if json {
                print(JSONValue.object(result).jsonText)
                return
            }
            print("valid token from issuer \(result["issuer"]?.stringValue ?? "?")")
            for key in ["sub", "aud", "email", "email_verified", "is_private_email", "real_user_status", "iat", "exp"] {
                if let value = result[key] { print("  \(key): \(value.stringValue ?? value.jsonText)") }
            }
        }
    }

    private static func standardInput() throws -> String {
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = read(STDIN_FILENO, &chunk, chunk.count)
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk[..<count]
            guard bytes.count <= 64 * 1024 else { throw ValidationError("the token on standard input is too long") }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
