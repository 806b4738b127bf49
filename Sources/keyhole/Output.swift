import KeyholeProtocol

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Formatting shared by the subcommands.
enum Output {
    static func error(_ message: String) {
        let line = message + "\n"
        line.withCString { pointer in _ = write(STDERR_FILENO, pointer, strlen(pointer)) }
    }

    static func number(_ value: JSONValue?) -> String {
        value?.intValue.map { String($0) } ?? "-"
    }

    /// "3d 4h", "5m 12s", "1.234s".
    static func duration(ms: Int64) -> String {
        let seconds = ms / 1000
        switch seconds {
        case ..<60: return "\(seconds).\(String(ms % 1000 + 1000).dropFirst())s"
        case ..<3600: return "\(seconds / 60)m \(seconds % 60)s"
        case ..<86_400: return "\(seconds / 3600)h \(seconds % 3600 / 60)m"
        default: return "\(seconds / 86_400)d \(seconds % 86_400 / 3600)h"
        }
    }
}

/// The process environment.
enum Environment {
    static func value(_ name: String) -> String? {
        getenv(name).map { String(cString: $0) }
    }
}
