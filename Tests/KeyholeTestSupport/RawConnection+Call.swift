import KeyholeProtocol
import NIOCore

extension RawConnection {
    /// Sends one request and reads its response (the connection has nothing else in flight).
    package func call(_ op: String, _ args: [String: JSONValue] = [:], id: Int = 1) throws -> JSONValue {
        let request: JSONValue = ["op": .string(op), "id": .int(Int64(id)), "args": .object(args)]
        try sendFrame(request.jsonText)
        return try readResponse()
    }

    /// The `result` of a request that must succeed.
    package func result(_ op: String, _ args: [String: JSONValue] = [:]) throws -> JSONValue {
        let response = try call(op, args)
        guard response["ok"] == true, let result = response["result"] else {
            throw Failure(description: "\(op) failed: \(response.jsonText)")
        }
        return result
    }

    /// The error code of a request that must fail.
    package func errorCode(_ op: String, _ args: [String: JSONValue] = [:]) throws -> String? {
        try call(op, args)["error"]?["code"]?.stringValue
    }
}
