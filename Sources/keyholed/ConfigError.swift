/// A configuration problem: keyholed does not start, and exits with EX_CONFIG (78).
struct ConfigError: Error, CustomStringConvertible {
    /// The key, as `table.key`, or the flag, as `--flag`.
    let key: String?
    /// The line of the file, when known.
    let line: Int?
    let message: String

    var description: String {
        var place = ""
        if let key { place += key }
        if let line { place += place.isEmpty ? "line \(line)" : " (line \(line))" }
        return place.isEmpty ? message : "\(place): \(message)"
    }
}
