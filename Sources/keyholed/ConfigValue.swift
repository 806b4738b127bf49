import KeyholeProtocol

/// A value of keyholed.toml as `ConfigFile` read it: TOML's types, carried by the JSON toml++ wrote
/// for the document. Integers and floats stay apart; dates, times, infinities and NaNs come as
/// strings (JSON has none of them), so that one where a string is expected reads as that string, and
/// is then held to whatever that key's strings must be (a duration, an absolute path, a URL...).
struct ConfigValue {
    let json: JSONValue

    var string: String? { json.stringValue }
    var bool: Bool? { json.boolValue }
    var int: Int? { json.intValue.map(Int.init) }
    var array: [ConfigValue]? { json.arrayValue?.map(ConfigValue.init) }
    var table: [String: ConfigValue]? { json.objectValue?.mapValues(ConfigValue.init) }
    /// Whether it is a table, without making one.
    var isTable: Bool { json.objectValue != nil }

    /// TOML's name for the type, for errors.
    var type: String {
        switch json {
        case .null: "null"
        case .bool: "bool"
        case .int: "int"
        case .double: "double"
        case .string: "string"
        case .array: "array"
        case .object: "table"
        }
    }
}
