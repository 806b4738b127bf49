import KeyholeProtocol

/// A value of keyholed.toml as `ConfigFile` read it: TOML's types, carried by the JSON toml++ wrote
/// for the document (integers and floats apart; dates and times as strings).
struct ConfigValue {
    let json: JSONValue

    var string: String? { json.stringValue }
    var bool: Bool? { json.boolValue }
    var int: Int? { json.intValue.map(Int.init) }
    /// A float, or an integer as one.
    var double: Double? { json.doubleValue }
    var array: [ConfigValue]? { json.arrayValue?.map(ConfigValue.init) }
    var table: [String: ConfigValue]? { json.objectValue?.mapValues(ConfigValue.init) }

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
