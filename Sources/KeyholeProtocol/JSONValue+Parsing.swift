import NIOCore

extension JSONValue {
    /// Parses one JSON text (RFC 8259, UTF-8 without a byte order mark).
    ///
    /// Parsing is strict: duplicate member names and nesting deeper than 64 arrays and objects are refused
    /// too (a request, read by `Request.parse`, may nest 32). A number without fraction or exponent that fits in 64 bits is an `.int`, any other number a
    /// `.double` (so `1.0` is a double).
    ///
    /// - Throws: `bad_request` naming what is wrong and its byte offset, without quoting the payload.
    public static func parse(_ bytes: ByteBuffer) throws(ProtocolError) -> JSONValue {
        try value(of: bytes.withUnsafeReadableBytes { JSONParser.parseResult($0) })
    }

    /// Parses one JSON text held in `bytes`, as `parse(_:)` does, reading them where they are.
    public static func parse(bytes: [UInt8]) throws(ProtocolError) -> JSONValue {
        try value(of: bytes.withUnsafeBytes { JSONParser.parseResult($0) })
    }

    private static func value(of result: Result<JSONValue, JSONParser.Failure>) throws(ProtocolError) -> JSONValue {
        switch result {
        case .success(let value): return value
        case .failure(let failure): throw .badRequest(failure.message)
        }
    }
}
