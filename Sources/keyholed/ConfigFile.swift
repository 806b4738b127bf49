import CKeyholeTOML
import CTOML
import KeyholeProtocol
import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// Reads keyholed.toml strictly: every table and key must be known, every value of the right type and
/// range, and each error names the key and its line.
struct ConfigFile {
    private let root: [String: ConfigValue]
    private let lines: [Substring]

    init(text: String) throws(ConfigError) {
        root = try Self.parse(text)
        lines = text.split(separator: "\n", omittingEmptySubsequences: false)
    }

    /// The document's top-level table, parsed by toml++ (through TOMLKit's C interface) and handed
    /// over as JSON, which toml++ writes itself. Not through TOMLKit's Swift interface: it copies a
    /// node on every lookup and frees none of them, nor anything else it gets from C (9 KB a parse of
    /// the packaged file, so that every reload leaked). Here everything toml++ hands back is freed
    /// (ReloadEndToEndTests.reloadsKeepMemory holds 10 000 reloads to less than 1 MiB).
    static func parse(_ text: String) throws(ConfigError) -> [String: ConfigValue] {
        let failure = UnsafeMutablePointer<CTOMLParseError>.allocate(capacity: 1)
        defer { failure.deallocate() }
        guard let table = text.withCString({ tableCreateFromString($0, failure) }) else {
            let description = String(cString: failure.pointee.description)
            free(UnsafeMutableRawPointer(mutating: failure.pointee.description))
            throw ConfigError(key: nil, line: Int(failure.pointee.source.begin.line), message: "not valid TOML: \(description)")
        }
        defer {
            // The C interface has no way to delete a table: emptied, its storage is given back
            // (CKeyholeTOML says why that is all its destructor would do). 96 bytes a parse
            // otherwise, seen with heaptrack.
            tableClear(table)
            ckeyhole_toml_release_emptied_table(UnsafeMutableRawPointer(table))
        }
        // Quoted infinities and NaNs (JSON has none), UTF-8 as it is, no indentation; dates and times
        // are always quoted.
        let json = tableConvertToJSON(table, jsonFlags)
        defer { free(json) }
        guard let parsed = try? JSONValue.parse(ByteBuffer(bytes: UnsafeRawBufferPointer(start: json, count: strlen(json)))),
            let members = parsed.objectValue
        else {
            throw ConfigError(key: nil, line: nil, message: "not valid TOML: its JSON form could not be read")
        }
        return members.mapValues(ConfigValue.init)
    }

    /// toml++'s format_flags::quote_infinities_and_nans | allow_unicode_strings.
    private static let jsonFlags: UInt64 = 1 << 1 | 1 << 5

    /// Refuses any top-level key or table outside `allowed` and `arrays` (arrays of tables, `[[name]]`).
    func checkTables(allowed: Set<String>, arrays: Set<String> = []) throws(ConfigError) {
        for key in root.keys.sorted() where !allowed.contains(key) && !arrays.contains(key) {
            let line = root[key]?.isTable == true ? line(ofTable: key) : line(of: key, in: nil)
            throw ConfigError(key: key, line: line, message: "unknown table or key")
        }
        for key in root.keys.sorted() where allowed.contains(key) && root[key]?.isTable != true {
            throw ConfigError(key: key, line: line(of: key, in: nil), message: "must be a table, as [\(key)]")
        }
        for key in root.keys.sorted() where arrays.contains(key) {
            guard let array = root[key]?.array, array.allSatisfy(\.isTable) else {
                throw ConfigError(key: key, line: line(of: key, in: nil), message: "must be tables, as [[\(key)]]")
            }
        }
    }

    /// The tables `[[name]]`, each refusing keys outside `keys`.
    func arraySections(_ name: String, keys: Set<String>) throws(ConfigError) -> [Section] {
        guard let array = root[name]?.array else { return [] }
        var sections: [Section] = []
        for (index, element) in array.enumerated() {
            guard let table = element.table else { continue }
            let section = Section(name: "\(name)[\(index)]", lookup: name, table: table, file: self)
            for key in table.keys.sorted() where !keys.contains(key) {
                throw section.error(key, "unknown key")
            }
            sections.append(section)
        }
        return sections
    }

    /// The table `[name]`, refusing keys outside `keys`; `nil` when the file has no such table.
    func section(_ name: String, keys: Set<String>) throws(ConfigError) -> Section? {
        guard let table = root[name]?.table else { return nil }
        for key in table.keys.sorted() where !keys.contains(key) {
            throw ConfigError(key: "\(name).\(key)", line: line(of: key, in: name), message: "unknown key")
        }
        return Section(name: name, lookup: name, table: table, file: self)
    }

    /// The line of the header `[name]` or `[[name]]`.
    func line(ofTable name: String) -> Int? {
        lines.firstIndex { raw in
            let header = raw.filter { $0 != " " && $0 != "\t" && $0 != "\"" }
            return header.hasPrefix("[\(name)]") || header.hasPrefix("[[\(name)]]")
        }.map { $0 + 1 }
    }

    /// The line of `key` in `[table]`, by a scan of the text: toml++'s JSON of the document keeps no
    /// positions.
    func line(of key: String, in table: String?) -> Int? {
        var current: String?
        for (index, raw) in lines.enumerated() {
            let line = raw.trimmingPrefix(while: { $0 == " " || $0 == "\t" })
            if line.hasPrefix("[") {
                let name = line.drop(while: { $0 == "[" }).prefix(while: { $0 != "]" })
                current = String(name.filter { $0 != "\"" && $0 != " " && $0 != "\t" })
                continue
            }
            guard current == table else { continue }
            for candidate in [key, "\"\(key)\""] where line.hasPrefix(candidate) {
                let rest = line.dropFirst(candidate.count).drop(while: { $0 == " " || $0 == "\t" })
                if rest.hasPrefix("=") { return index + 1 }
            }
        }
        return nil
    }

    /// One table of the file, with typed accessors that report the key and line on error.
    struct Section {
        /// As shown in errors: `server`, `issuer[1]`.
        let name: String
        /// As written in the file's headers, to find lines.
        let lookup: String
        let table: [String: ConfigValue]
        let file: ConfigFile

        func error(_ key: String, _ message: String) -> ConfigError {
            ConfigError(key: "\(name).\(key)", line: file.line(of: key, in: lookup), message: message)
        }

        func stringArray(_ key: String) throws(ConfigError) -> [String]? {
            guard let value = table[key] else { return nil }
            guard let array = value.array else { throw error(key, "must be an array of strings") }
            var strings: [String] = []
            for element in array {
                guard let string = element.string else { throw error(key, "must be an array of strings") }
                strings.append(string)
            }
            return strings
        }

        func string(_ key: String) throws(ConfigError) -> String? {
            guard let value = table[key] else { return nil }
            guard let string = value.string else { throw error(key, "must be a string, got \(value.type)") }
            return string
        }

        func bool(_ key: String) throws(ConfigError) -> Bool? {
            guard let value = table[key] else { return nil }
            guard let bool = value.bool else { throw error(key, "must be true or false, got \(value.type)") }
            return bool
        }

        func integer(_ key: String, in range: ClosedRange<Int>) throws(ConfigError) -> Int? {
            guard let value = table[key] else { return nil }
            guard let int = value.int else { throw error(key, "must be an integer, got \(value.type)") }
            guard range.contains(int) else { throw error(key, "must be from \(range.lowerBound) to \(range.upperBound), got \(int)") }
            return int
        }

        /// An integer of bytes or a string with a unit ("64KiB").
        func size(_ key: String, in range: ClosedRange<Int>) throws(ConfigError) -> Int? {
            guard let value = table[key] else { return nil }
            let bytes: Int
            if let int = value.int {
                bytes = int
            } else if let text = value.string, let parsed = ConfigParsing.size(text) {
                bytes = parsed
            } else {
                throw error(key, "must be a size: an integer of bytes or a string such as \"64KiB\" or \"16MiB\"")
            }
            guard range.contains(bytes) else {
                throw error(key, "must be from \(range.lowerBound) to \(range.upperBound) bytes, got \(bytes)")
            }
            return bytes
        }

        func duration(_ key: String, in range: ClosedRange<TimeAmount>) throws(ConfigError) -> TimeAmount? {
            guard let value = table[key] else { return nil }
            guard let text = value.string, let duration = ConfigParsing.duration(text) else {
                throw error(key, "must be a duration string such as \"500ms\", \"10s\", \"5m\", \"24h\" or \"30d\"")
            }
            guard range.contains(duration) else {
                // Each key has its own range: the message names this one's.
                let (lower, upper) = (ConfigParsing.durationText(range.lowerBound), ConfigParsing.durationText(range.upperBound))
                throw error(key, "must be from \(lower) to \(upper), got \"\(text)\"")
            }
            return duration
        }

        /// An octal mode string ("0660"). Integers are refused: a decimal 660 would silently mean 0o1224.
        func mode(_ key: String) throws(ConfigError) -> UInt32? {
            guard let value = table[key] else { return nil }
            guard let text = value.string, let mode = ConfigParsing.mode(text) else {
                throw error(key, "must be an octal file mode string such as \"0660\"")
            }
            return mode
        }
    }
}
