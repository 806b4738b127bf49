import ArgumentParser
import KeyholeProtocol
import NIOCore

struct Call: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Send one request and print the response as JSON.",
        discussion: "Examples: keyhole call ping; keyhole call stats '{}'"
    )

    @OptionGroup var connection: ConnectionOptions

    @Argument(help: "The operation, such as ping.")
    var op: String

    @Argument(help: ArgumentHelp("The arguments, a JSON object.", valueName: "json-args"))
    var args: String?

    func validate() throws {
        _ = try parsedArgs()
    }

    private func parsedArgs() throws -> [String: JSONValue] {
        guard let args else { return [:] }
        guard case .object(let members)? = try? JSONValue.parse(ByteBuffer(string: args)) else {
            throw ValidationError("json-args must be a JSON object, such as '{\"ms\": 10}'")
        }
        return members
    }

    func run() async throws {
        let args = try parsedArgs()
        try await connection.withClient { client in
            let response = try await client.send(op, args: args)
            var buffer = ByteBuffer()
            response.write(to: &buffer)
            print(String(buffer: buffer))
            if case .failure(let error) = response.outcome { throw error }
        }
    }
}
