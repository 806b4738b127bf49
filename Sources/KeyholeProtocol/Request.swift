import NIOCore

/// A request envelope (PROTOCOL.md section 3).
public struct Request: Sendable, Hashable {
    /// The id echoed in the response, if the client gave one.
    public var id: RequestID?
    /// The operation.
    public var op: String {
        didSet { operationIndex = nil }
    }
    /// `op`'s index in the `OperationNames` the request was parsed with, when it is one of them;
    /// `nil` otherwise, and for a request built in code (or whose `op` was set since).
    package private(set) var operationIndex: Int?
    /// The operation's arguments; empty when absent. For a request read from a frame, this builds them
    /// from `sentArgs` on every use: an operation reads the members it knows from `sentArgs` instead.
    public var args: [String: JSONValue] {
        get { sentArgs?.dictionary ?? builtArgs }
        set {
            builtArgs = newValue
            sentArgs = nil
        }
    }
    private var builtArgs: [String: JSONValue]
    /// The `args` object as the frame held it, checked with the envelope and read in place; `nil` for
    /// a request built in code, and for one sent without `args` (or with `null`). It holds the frame's
    /// buffer: see `owned`.
    public private(set) var sentArgs: CheckedJSONObject?

    /// A request.
    public init(id: RequestID?, op: String, args: [String: JSONValue]) {
        self.id = id
        self.op = op
        self.builtArgs = args
        self.sentArgs = nil
    }

    /// A request without arguments. (`[:]` as a default would build an empty dictionary from a
    /// literal's list on every request read.)
    public init(id: RequestID?, op: String) {
        self.init(id: id, op: op, args: Dictionary())
    }

    /// The request holding nothing of the frame it was read from (its `sentArgs` copied out): for a
    /// request kept past its synchronous part, so that it does not hold a whole read buffer.
    public var owned: Request {
        var request = self
        request.sentArgs = sentArgs?.owned
        return request
    }

    public static func == (lhs: Request, rhs: Request) -> Bool {
        lhs.id == rhs.id && lhs.op == rhs.op && lhs.args == rhs.args
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(id)
        hasher.combine(op)
        hasher.combine(args)
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
        try parse(frame, operations: nil)
    }

    /// `parse(_:)`; with `operations`, an `op` that is one of them is found by its bytes
    /// (`operationIndex`), and `op` is that name's `String`, not one made from the frame.
    package static func parse(_ frame: ByteBuffer, operations: OperationNames?) throws(Rejection) -> Request {
        // The envelope's members are picked up as they are read: building a dictionary of four
        // members only to look three up costs a request more than all the rest of its parsing.
        var rawID: JSONValue?
        var version: JSONValue?
        var opSeen = false
        // A string `op` is read where it lies and looked up by its bytes, before the frame is let go.
        var opText: (content: Range<Int>, hasEscapes: Bool)?
        var knownOp: (op: String, index: Int?)?
        var rawArgs: JSONValue?
        // An object `args` is checked here, as strictly as the rest, but not built: where it lies and
        // how many members it has. Its members are read in place by the operation.
        var argsObject: (range: Range<Int>, count: Int)?
        var others: [String] = []
        let parsed = frame.withUnsafeReadableBytes { bytes in
            Result { () throws(JSONParser.Failure) -> Bool in
                try JSONParser.parseObjectMembers(bytes, depthLimit: JSONParser.requestMaximumDepth) {
                    name, offset, parser throws(JSONParser.Failure) in
                    // The envelope's own names are recognised by their bytes: no String is made of them.
                    let isNew: Bool
                    if parser.name(name, is: "id") {
                        isNew = rawID == nil
                        rawID = try parser.parseValue()
                    } else if parser.name(name, is: "op") {
                        isNew = !opSeen
                        opSeen = true
                        if parser.index < parser.bytes.count, parser.bytes[parser.index] == UInt8(ascii: "\"") {
                            opText = try parser.scanString()
                        } else {
                            try parser.checkValue()  // not a string: refused below, once the rest is checked
                        }
                    } else if parser.name(name, is: "args") {
                        isNew = rawArgs == nil && argsObject == nil
                        if parser.index < parser.bytes.count, parser.bytes[parser.index] == UInt8(ascii: "{") {
                            let start = parser.index
                            let count = try parser.checkObject()
                            argsObject = (start..<parser.index, count)
                        } else {
                            rawArgs = try parser.parseValue()
                        }
                    } else if parser.name(name, is: "v") {
                        isNew = version == nil
                        version = try parser.parseValue()
                    } else {
                        // The value first: its faults are found before the cap's and the repeat's.
                        try parser.checkValue()
                        guard others.count < maximumUnknownMembers else {
                            throw JSONParser.Failure(offset: offset, reason: .tooManyMembers(maximumUnknownMembers), atEnd: false)
                        }
                        let text = parser.string(of: name)
                        isNew = !others.contains(text)
                        others.append(text)
                    }
                    guard isNew else {
                        throw JSONParser.Failure(offset: offset, reason: .duplicateMember(parser.string(of: name)), atEnd: false)
                    }
                }
            }.map { isObject in
                if isObject, let opText {
                    knownOp = Self.operation(UnsafeRawBufferPointer(rebasing: bytes[opText.content]), hasEscapes: opText.hasEscapes, in: operations)
                }
                return isObject
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
        guard let knownOp else {
            throw Rejection(id: id, error: .badRequest("'op' must be present and a string"))
        }
        var sentArgs: CheckedJSONObject?
        if let argsObject {
            let text = frame.getSlice(at: frame.readerIndex + argsObject.range.lowerBound, length: argsObject.range.count)!
            sentArgs = CheckedJSONObject(checked: text, count: argsObject.count)
        } else {
            switch rawArgs {
            case nil, .null?: break
            default: throw Rejection(id: id, error: .badRequest("'args' must be an object"))
            }
        }
        return Request(id: id, op: knownOp.op, operationIndex: knownOp.index, sentArgs: sentArgs)
    }

    /// A request read from a frame, made whole at once: built through `init(id:op:)` and then
    /// changed, it was copied and destroyed on the way (on every request). `parse` still builds it
    /// twice and copies one (about 420 instructions a request, callgrind): the cause is not found yet.
    private init(id: RequestID?, op: String, operationIndex: Int?, sentArgs: CheckedJSONObject?) {
        self.id = id
        self.op = op
        self.operationIndex = operationIndex
        self.builtArgs = Dictionary()
        self.sentArgs = sentArgs
    }

    /// The `op` whose content (between its quotes) is `text`, and its index in `operations`.
    private static func operation(_ text: UnsafeRawBufferPointer, hasEscapes: Bool, in operations: OperationNames?) -> (op: String, index: Int?) {
        guard !hasEscapes else {
            let op = JSONParser.decodeEscapes(text)
            return (op, operations?.index(of: op))
        }
        if let operations, let index = operations.index(of: text) { return (operations.name(at: index), index) }
        return (String(decoding: text, as: UTF8.self), nil)
    }

    /// Writes the request's JSON body (without the frame header).
    public func write(to buffer: inout ByteBuffer) {
        var members: [String: JSONValue] = ["op": .string(op)]
        if let id { members["id"] = id.jsonValue }
        if !args.isEmpty { members["args"] = .object(args) }
        JSONValue.object(members).write(to: &buffer)
    }
}
