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
    var logLevel: Logger.Level
    var metadata: Logger.Metadata = [:]
    var metadataProvider: Logger.MetadataProvider?

    init(label: String, level: Logger.Level) {
        self.logLevel = level
    }

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        var line = Self.timestamp()
        line += " \(event.level) \(Self.sanitised(event.message.description))"
        var all = metadata
        if let provided = metadataProvider?.get() { all.merge(provided) { _, new in new } }
        if let extra = event.metadata { all.merge(extra) { _, new in new } }
        for key in all.keys.sorted() {
            line += " \(Self.sanitised(key))=\(Self.quoted("\(all[key]!)"))"
        }
        line += "\n"
        // One write(2) per line keeps lines whole when several threads log at once.
        line.withCString { pointer in _ = write(STDERR_FILENO, pointer, strlen(pointer)) }
    }

    private static func sanitised(_ text: String) -> String {
        String(text.unicodeScalars.map { $0.value < 0x21 || $0 == "=" ? "_" : Character($0) })
    }

    private static func quoted(_ value: String) -> String {
        guard value.isEmpty || value.unicodeScalars.contains(where: { $0.value < 0x21 || $0 == "\"" || $0 == "\\" || $0.value == 0x7F })
        else { return value }
        var out = "\""
        for scalar in value.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case " ": out += " "
            case _ where scalar.value < 0x20 || scalar.value == 0x7F:
                out += "\\x" + String(scalar.value, radix: 16)
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
