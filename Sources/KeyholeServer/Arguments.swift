import KeyholeProtocol

/// A request's `args`, read member by member with types and bounds checked; `finish()` refuses any
/// member nobody read, so a misspelt argument never passes silently.
///
/// `finish()` compares how many distinct members were found with how many were sent. The names read
/// are kept inline (8 of them; more spill into an array), not in an array: this runs on every request.
struct Arguments {
    private let args: [String: JSONValue]
    /// How many distinct names read were present.
    private var found = 0
    /// The names read, for `finish()` and for counting each name once.
    private var names = InlineArray<8, String>(repeating: "")
    private var nameCount = 0
    private var moreNames: [String] = []

    init(_ request: Request) { args = request.args }

    /// The member `name`, counted as read.
    private mutating func member(_ name: String) -> JSONValue? {
        let value = args.isEmpty ? nil : args[name]
        if !wasRead(name) {
            if nameCount < names.count {
                names[nameCount] = name
                nameCount += 1
            } else {
                moreNames.append(name)
            }
            if value != nil { found += 1 }
        }
        return value
    }

    private func wasRead(_ name: String) -> Bool {
        for index in 0..<nameCount where names[index] == name { return true }
        return moreNames.contains(name)
    }

    /// A string of 1 to `maxBytes` UTF-8 bytes.
    mutating func string(_ name: String, required: Bool = false, maxBytes: Int = 255) throws(ProtocolError) -> String? {
        switch member(name) {
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
        switch member(name) {
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
        return member(name)
    }

    /// Refuses members not read.
    func finish() throws(ProtocolError) {
        guard found < args.count else { return }
        // For the error only: the first member in sorted order that was not read.
        let unknown = args.keys.sorted().first { !wasRead($0) }!
        throw .badRequest("unknown argument '\(unknown)'")
    }
}
