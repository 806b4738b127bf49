import NIOCore

/// A response envelope (PROTOCOL.md section 4).
public struct Response: Sendable, Hashable {
    /// The id of the request answered, or `nil`.
    public var id: RequestID?
    /// The result object, or the error.
    public var outcome: Result<[String: JSONValue], ProtocolError>
    /// A result already encoded as a JSON object, written instead of `outcome`'s (see `encoded`).
    public private(set) var encodedResult: ByteBuffer?

    /// A response.
    public init(id: RequestID?, outcome: Result<[String: JSONValue], ProtocolError>) {
        self.id = id
        self.outcome = outcome
    }

    /// A success whose result is already encoded: `result` must be one compact JSON object. Lets a
    /// server keep a result it will send again (say, for a cached token) without building it anew.
    /// `outcome` reads as an empty success.
    public static func encoded(id: RequestID?, result: ByteBuffer) -> Response {
        var response = Response(id: id, outcome: .success([:]))
        response.encodedResult = result
        return response
    }

    /// Writes the response's JSON body (without the frame header), members in a fixed order.
    public func write(to buffer: inout ByteBuffer) {
        switch outcome {
        case .success(let result):
            Self.writeSuccessHead(id: id, to: &buffer)
            if let encodedResult {
                buffer.writeImmutableBuffer(encodedResult)
            } else {
                JSONValue.object(result).write(to: &buffer)
            }
        case .failure(let error):
            buffer.writeStaticString("{\"id\":")
            (id?.jsonValue ?? .null).write(to: &buffer)
            buffer.writeStaticString(",\"ok\":false,\"error\":{\"code\":")
            JSONValue.writeString(error.code.rawValue, to: &buffer)
            buffer.writeStaticString(",\"message\":")
            JSONValue.writeString(error.message, to: &buffer)
            if let retryAfterMs = error.retryAfterMs {
                buffer.writeStaticString(",\"retry_after_ms\":")
                buffer.writeString(String(retryAfterMs))
            }
            if let appleError = error.appleError {
                buffer.writeStaticString(",\"apple_error\":")
                JSONValue.writeString(appleError, to: &buffer)
            }
            buffer.writeInteger(UInt8(ascii: "}"))
        }
        buffer.writeInteger(UInt8(ascii: "}"))
    }

    /// Writes a success's body up to its result: `{"id":…,"ok":true,"result":`. The result object and
    /// one closing `}` follow; for a server that writes a result in place, with no `Response` made.
    public static func writeSuccessHead(id: RequestID?, to buffer: inout ByteBuffer) {
        buffer.writeJSON(guess: headGuess(id)) { out in writeSuccessHead(id: id, to: &out) }
    }

    /// A frame's length, as four zero bytes to be filled in, then `writeSuccessHead`, in one write (each
    /// write through `ByteBuffer` costs its checks, on every request); returns where the frame starts.
    public static func writeFramedSuccessHead(id: RequestID?, to buffer: inout ByteBuffer) -> Int {
        let start = buffer.writerIndex
        buffer.writeJSON(guess: 4 + headGuess(id)) { out in
            out.write("\0\0\0\0")
            writeSuccessHead(id: id, to: &out)
        }
        return start
    }

    /// Room for the head: a string id as it is plus its quotes (`writeJSON(guess:)` tries again with
    /// the exact room when escapes take more); not six times its size, which a client sending a
    /// 16 MiB id would have had reserved for every answer.
    private static func headGuess(_ id: RequestID?) -> Int {
        if case .string(let text)? = id { return 64 + text.utf8.count }
        return 64
    }

    private static func writeSuccessHead(id: RequestID?, to out: inout JSONOutput) {
        out.write("{\"id\":")
        switch id {
        case .int(let value)?: out.write(integer: value)
        case .string(let text)?: out.write(string: text)
        case nil: out.write("null")
        }
        out.write(",\"ok\":true,\"result\":")
    }

    /// Reads a response from a frame body, as a client does.
    ///
    /// An error code this version does not know is read as `internal`, as PROTOCOL.md section 6 asks.
    /// - Throws: `bad_request` when the frame is not a well-formed response.
    public static func parse(_ frame: ByteBuffer) throws(ProtocolError) -> Response {
        guard case .object(let members) = try JSONValue.parse(frame) else {
            throw .badRequest("response is not a JSON object")
        }
        let id = members["id"].flatMap(RequestID.init)
        switch (members["ok"], members["result"], members["error"]) {
        case (.bool(true)?, .object(let result)?, _):
            return Response(id: id, outcome: .success(result))
        case (.bool(false)?, _, .object(let error)?):
            let rawCode = error["code"]?.stringValue ?? "internal"
            let message = error["message"]?.stringValue ?? ""
            let code = ProtocolError.Code(rawValue: rawCode) ?? .internal
            let retry = error["retry_after_ms"]?.intValue.map { Int($0) }
            let text = code.rawValue == rawCode ? message : "\(rawCode): \(message)"
            let appleError = error["apple_error"]?.stringValue
            return Response(id: id, outcome: .failure(ProtocolError(code: code, message: text, retryAfterMs: retry, appleError: appleError)))
        default:
            throw .badRequest("response has neither a result object nor an error object")
        }
    }
}
