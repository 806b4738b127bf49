import KeyholeProtocol

/// A request's `args`, read member by member with types and bounds checked; `finish()` refuses any
/// member nobody read, so a misspelt argument never passes silently.
struct Arguments {
    private let args: [String: JSONValue]
    private var read: [String] = []

    init(_ request: Request) { args = request.args }

    /// A string of 1 to `maxBytes` UTF-8 bytes.
    mutating func string(_ name: String, required: Bool = false, maxBytes: Int = 255) throws(ProtocolError) -> String? {
        read.append(name)
        switch args[name] {
        case .string(let value)?:
            guard !value.isEmpty, value.utf8.count <= maxBytes else {
                throw .badRequest("'\(name)' must be 1 to \(maxBytes) bytes long")
            }
            return value
        case nil, .null?:
            if required { throw .badRequest("'\(name)' is required") }
            return nil
        default:
            throw .badRequest("'\(name)' must be a string")
        }
    }

    /// An integer within `range`.
    mutating func int(_ name: String, in range: ClosedRange<Int64>) throws(ProtocolError) -> Int64? {
        read.append(name)
        switch args[name] {
        case .int(let value)?:
            guard range.contains(value) else {
                throw .badRequest("'\(name)' must be from \(range.lowerBound) to \(range.upperBound)")
            }
            return value
        case nil, .null?:
            return nil
        default:
            throw .badRequest("'\(name)' must be an integer")
        }
    }

    /// The member as sent, JSON `null` included (`.some(.null)`), or `nil` when absent.
    mutating func value(_ name: String) -> JSONValue? {
        read.append(name)
        return args[name]
    }

    /// Refuses members not read.
    func finish() throws(ProtocolError) {
        if let unknown = args.keys.sorted().first(where: { !read.contains($0) }) {
            throw .badRequest("unknown argument '\(unknown)'")
        }
    }
}
