import NIOCore

/// A request envelope (PROTOCOL.md section 3).
public struct Request: Sendable, Hashable {
    /// The id echoed in the response, if the client gave one.
    public var id: RequestID?
    /// The operation.
    public var op: String
    /// The operation's arguments; empty when absent.
    public var args: [String: JSONValue]

    /// A request.
    public init(id: RequestID?, op: String, args: [String: JSONValue] = [:]) {
        self.id = id
        self.op = op
        self.args = args
    }

    /// Why a frame could not be taken as a request, with the id to answer to when it was readable.
    public struct Rejection: Error, Sendable {
        /// The request's id, or `nil` when it was absent or unreadable.
        public var id: RequestID?
        /// The error to answer with.
        public var error: ProtocolError
    }

    /// The most top-level members a request may have besides `v`, `id`, `op` and `args`. They are
    /// ignored, but each is checked against the others for repeats: without a bound, a frame of
    /// thousands of short names costs the event loop time quadratic in its size.
    public static let maximumUnknownMembers = 32

    /// Reads a request from a frame body, checking in the order PROTOCOL.md section 3 gives.
    public static func parse(_ frame: ByteBuffer) throws(Rejection) -> Request {
        // The envelope's members are picked up as they are read: building a dictionary of four
        // members only to look three up costs a request more than all the rest of its parsing.
        var rawID: JSONValue?
        var version: JSONValue?
        var rawOp: JSONValue?
        var rawArgs: JSONValue?
        var others: [String] = []
        let parsed = frame.withUnsafeReadableBytes { bytes in
            Result { () throws(JSONParser.Failure) -> Bool in
                try JSONParser.parseObjectMembers(bytes, depthLimit: JSONParser.requestMaximumDepth) {
                    name, offset, value throws(JSONParser.Failure) in
                    let isNew: Bool
                    switch name {
                    case "id": isNew = rawID == nil; rawID = value
                    case "v": isNew = version == nil; version = value
                    case "op": isNew = rawOp == nil; rawOp = value
                    case "args": isNew = rawArgs == nil; rawArgs = value
                    default:
                        guard others.count < maximumUnknownMembers else {
                            throw JSONParser.Failure(offset: offset, reason: .tooManyMembers(maximumUnknownMembers), atEnd: false)
                        }
                        isNew = !others.contains(name)
                        others.append(name)
                    }
                    guard isNew else {
                        throw JSONParser.Failure(offset: offset, reason: .duplicateMember(name), atEnd: false)
                    }
                }
            }
        }
        switch parsed {
        case .success(true): break
        case .success(false): throw Rejection(id: nil, error: .badRequest("payload is not a JSON object"))
        case .failure(let failure): throw Rejection(id: nil, error: .badRequest(failure.message))
        }
        var id: RequestID?
        if let rawID, rawID != .null {
            guard let parsed = RequestID(rawID) else {
                throw Rejection(id: nil, error: .badRequest("'id' must be a string or a 64-bit integer"))
            }
            id = parsed
        }
        if let version, version != .int(1) {
            throw Rejection(id: id, error: .unsupportedVersion())
        }
        guard case .string(let op)? = rawOp else {
            throw Rejection(id: id, error: .badRequest("'op' must be present and a string"))
        }
        var args: [String: JSONValue] = [:]
        switch rawArgs {
        case nil, .null?: break
        case .object(let object)?: args = object
        default: throw Rejection(id: id, error: .badRequest("'args' must be an object"))
        }
        return Request(id: id, op: op, args: args)
    }

    /// Writes the request's JSON body (without the frame header).
    public func write(to buffer: inout ByteBuffer) {
        var members: [String: JSONValue] = ["op": .string(op)]
        if let id { members["id"] = id.jsonValue }
        if !args.isEmpty { members["args"] = .object(args) }
        JSONValue.object(members).write(to: &buffer)
    }
}
