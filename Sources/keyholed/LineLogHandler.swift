#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif
import Logging

/// Writes one line per event to stderr: `2026-11-21T17:41:00.123Z info server.listening key=value ...`.
///
/// The message is the event's stable name; values that could break the line are quoted and escaped, so
/// a hostile string can never forge a second event.
struct LineLogHandler: LogHandler {
    /// The level `level` gives now (a reload may change it), unless set on this handler.
    var logLevel: Logger.Level {
        get { fixedLevel ?? level() }
        set { fixedLevel = newValue }
    }
    private var fixedLevel: Logger.Level?
    private let level: @Sendable () -> Logger.Level
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String, level: @escaping @Sendable () -> Logger.Level) {
        self.level = level
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var all = metadata
        if let provided = metadataProvider?.get() { all.merge(provided) { _, new in new } }
        if let extra = event.metadata { all.merge(extra) { _, new in new } }
        let line = Self.timestamp() + " " + Self.format(level: event.level, event: event.message.description, metadata: all)
        // One write(2) per line keeps lines whole when several threads log at once.
        line.withCString { pointer in _ = write(STDERR_FILENO, pointer, strlen(pointer)) }
    }

    /// `level event key=value ...` and a newline: exactly one line, whatever the values hold.
    static func format(level: Logger.Level, event: String, metadata: Logger.Metadata) -> String {
        "\(level) \(message(event: event, metadata: metadata))\n"
    }

    /// `event key=value ...`: the line without level (the journal's MESSAGE).
    static func message(event: String, metadata: Logger.Metadata) -> String {
        var line = sanitised(event)
        for (key, value) in metadata.sorted(by: { $0.key < $1.key }) {
            line += " \(sanitised(key))=\(quoted("\(value)"))"
        }
        return line
    }

    /// Event names and keys: printable ASCII other than `=`, anything else replaced.
    private static func sanitised(_ text: String) -> String {
        String(text.unicodeScalars.map { (0x21...0x7E).contains($0.value) && $0 != "=" ? Character($0) : "_" })
    }

    /// Scalars that could end a line, fake one, or reorder what a terminal shows.
    private static func needsEscape(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case ..<0x20, 0x7F...0x9F, 0x2028, 0x2029, 0x200E, 0x200F, 0x202A...0x202E, 0x2066...0x2069: true
        default: false
        }
    }

    private static func quoted(_ value: String) -> String {
        guard value.isEmpty || value.unicodeScalars.contains(where: { $0 == " " || $0 == "\"" || $0 == "\\" || needsEscape($0) })
        else { return value }
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case _ where needsEscape(scalar):
                let hex = String(scalar.value, radix: 16)
                out += "\\u{" + hex + "}"
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }

    private static func timestamp() -> String {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        var parts = tm()
        var seconds = now.tv_sec
        gmtime_r(&seconds, &parts)
        func pad(_ value: Int32, _ width: Int) -> String {
            let digits = String(value)
            return String(repeating: "0", count: max(0, width - digits.count)) + digits
        }
        return "\(parts.tm_year + 1900)-\(pad(parts.tm_mon + 1, 2))-\(pad(parts.tm_mday, 2))T"
            + "\(pad(parts.tm_hour, 2)):\(pad(parts.tm_min, 2)):\(pad(parts.tm_sec, 2))."
            + "\(pad(Int32(now.tv_nsec / 1_000_000), 3))Z"
    }
}
