/// A request's `id`: a string or a signed 64-bit integer, echoed in its response.
public enum RequestID: Sendable, Hashable, CustomStringConvertible {
    case int(Int64)
    case string(String)

    /// The id as it appears in JSON.
    public var jsonValue: JSONValue {
        switch self {
        case .int(let value): .int(value)
        case .string(let value): .string(value)
        }
    }

    /// The id from a JSON value; `nil` for any other type than string or integer.
    public init?(_ value: JSONValue) {
        switch value {
        case .int(let int): self = .int(int)
        case .string(let string): self = .string(string)
        default: return nil
        }
    }

    /// The id as JSON text.
    public var description: String { jsonValue.jsonText }
}
