/// The PostgreSQL schema keyholed's tables live in (`[postgres] schema`), checked once so that it
/// can be written into SQL: a schema name cannot be a bound parameter.
public struct SchemaName: Sendable, Hashable, CustomStringConvertible {
    /// The name: 1 to 48 characters, a lower-case ASCII letter or `_` first, then letters, digits or
    /// `_`; not starting `pg_`.
    public let name: String

    /// `nil` when `name` is not such an identifier. Lower-case only: PostgreSQL folds unquoted names,
    /// so a mixed-case one would name different schemas in psql and here.
    public init?(_ name: String) {
        let bytes = Array(name.utf8)
        guard (1...48).contains(bytes.count), let first = bytes.first, Self.isLetter(first) else { return nil }
        guard bytes.allSatisfy({ Self.isLetter($0) || ($0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9")) }) else { return nil }
        // PostgreSQL keeps pg_ names for its own schemas and refuses to create one.
        guard !name.hasPrefix("pg_") else { return nil }
        self.name = name
    }

    /// The default, `keyhole`.
    public static let standard = SchemaName("keyhole")!

    public var description: String { name }

    /// The name quoted as an SQL identifier (it has no `"` to escape).
    var quoted: String { "\"\(name)\"" }

    /// `<schema>.<table>`, quoted.
    func table(_ table: String) -> String { "\(quoted).\"\(table)\"" }

    /// The channel the hosts sharing this schema NOTIFY on (POSTGRES.md, "Reads").
    var channel: String { "keyhole_\(name)" }

    /// The advisory lock migrations hold: FNV-1a (64 bits) of `keyhole:<schema>`, so that two
    /// deployments in one database (two schemas) do not wait for each other.
    var advisoryLockKey: Int64 {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in "keyhole:\(name)".utf8 {
            hash ^= UInt64(byte)
            hash &*= 0x0000_0100_0000_01b3
        }
        return Int64(bitPattern: hash)
    }

    private static func isLetter(_ byte: UInt8) -> Bool {
        (byte >= UInt8(ascii: "a") && byte <= UInt8(ascii: "z")) || byte == UInt8(ascii: "_")
    }
}
