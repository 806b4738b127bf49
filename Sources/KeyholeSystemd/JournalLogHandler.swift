import CKeyholeSystemd
import Logging

#if canImport(Glibc)
import Glibc
#endif

/// Logs to the systemd journal with structured fields (sd_journal_sendv): MESSAGE, PRIORITY,
/// SYSLOG_IDENTIFIER, KEYHOLE_EVENT (the event's stable name), and each metadata key as a field of
/// its own, `KEYHOLE_` and the key in capitals (`op` is KEYHOLE_OP, `code` KEYHOLE_CODE), so that
/// `journalctl KEYHOLE_EVENT=server.listening` or `KEYHOLE_CODE=storage_unavailable` finds them.
public struct JournalLogHandler: LogHandler {
    /// The level `level` gives now (a reload may change it), unless set on this handler.
    public var logLevel: Logger.Level {
        get { fixedLevel ?? level() }
        set { fixedLevel = newValue }
    }
    private var fixedLevel: Logger.Level?
    private let level: @Sendable () -> Logger.Level
    public var metadata: Logger.Metadata = [:]
    public var metadataProvider: Logger.MetadataProvider?
    private let identifier: String
    private let message: @Sendable (_ event: String, _ metadata: Logger.Metadata) -> String

    /// - Parameter message: the human MESSAGE of an event (keyholed uses its plain log line).
    public init(identifier: String, level: Logger.Level, message: @escaping @Sendable (_ event: String, _ metadata: Logger.Metadata) -> String) {
        self.init(identifier: identifier, level: { level }, message: message)
    }

    /// A handler whose level is read from `level` at each event, so that a reload can change it.
    public init(
        identifier: String, level: @escaping @Sendable () -> Logger.Level,
        message: @escaping @Sendable (_ event: String, _ metadata: Logger.Metadata) -> String
    ) {
        self.identifier = identifier
        self.level = level
        self.message = message
    }

    public subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    public func log(event: LogEvent) {
        var all = metadata
        if let provided = metadataProvider?.get() { all.merge(provided) { _, new in new } }
        if let extra = event.metadata { all.merge(extra) { _, new in new } }
        let name = event.message.description
        var fields = [
            "MESSAGE=" + message(name, all), "PRIORITY=\(Self.priority(event.level))", "SYSLOG_IDENTIFIER=\(identifier)",
            "KEYHOLE_EVENT=" + name, "CODE_FILE=\(event.file)", "CODE_LINE=\(event.line)", "CODE_FUNC=\(event.function)",
        ]
        for (key, value) in all.sorted(by: { $0.key < $1.key }) { fields.append(Self.fieldName(key) + "=\(value)") }
        Self.send(fields)
    }

    /// syslog's priorities, as journalctl -p reads them.
    static func priority(_ level: Logger.Level) -> Int {
        switch level {
        case .trace, .debug: 7
        case .info: 6
        case .notice: 5
        case .warning: 4
        case .error: 3
        case .critical: 2
        }
    }

    /// A journal field name: capitals, digits and underscores, not starting with one, at most 64 bytes.
    static func fieldName(_ key: String) -> String {
        let upper = key.uppercased().unicodeScalars.map { ("A"..."Z").contains($0) || ("0"..."9").contains($0) ? Character($0) : "_" }
        return String(("KEYHOLE_" + String(upper)).prefix(64))
    }

    /// One sd_journal_sendv call: the fields packed in one buffer, an iovec for each (values may hold
    /// newlines: sendv keeps them).
    private static func send(_ fields: [String]) {
        var bytes: [UInt8] = []
        var ranges: [Range<Int>] = []
        for field in fields {
            let start = bytes.count
            bytes += field.utf8
            ranges.append(start..<bytes.count)
        }
        bytes.withUnsafeMutableBytes { buffer in
            let vectors = ranges.map { iovec(iov_base: buffer.baseAddress! + $0.lowerBound, iov_len: $0.count) }
            _ = vectors.withUnsafeBufferPointer { sd_journal_sendv($0.baseAddress, CInt($0.count)) }
        }
    }

    /// Whether stderr is the journal's stream (systemd sets JOURNAL_STREAM to its device and inode):
    /// then structured entries replace plain lines.
    public static var isStandardErrorJournal: Bool {
        guard let value = getenv("JOURNAL_STREAM").map({ String(cString: $0) }) else { return false }
        let parts = value.split(separator: ":")
        guard parts.count == 2, let device = UInt64(parts[0]), let inode = UInt64(parts[1]) else { return false }
        var status = stat()
        guard fstat(STDERR_FILENO, &status) == 0 else { return false }
        return UInt64(status.st_dev) == device && UInt64(status.st_ino) == inode
    }
}
