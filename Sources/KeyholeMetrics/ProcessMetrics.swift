#if canImport(Glibc)
import Glibc
#endif

/// The `process_*` metrics every Prometheus client library exports, read from /proc/self.
enum ProcessMetrics {
    static func read(into reading: inout MetricsExporter.Reading) {
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        if let stat = contents("/proc/self/stat"), let close = stat.lastIndex(of: UInt8(ascii: ")")) {
            // Fields after the command's closing parenthesis, from field 3 (state) on.
            let fields = stat[stat.index(after: close)...].split(separator: UInt8(ascii: " ")).map { String(decoding: $0, as: UTF8.self) }
            if fields.count > 21, let user = Double(fields[11]), let system = Double(fields[12]), let start = Double(fields[19]),
                let rssPages = Double(fields[21]), ticks > 0
            {
                reading.total("process_cpu_seconds_total", [], (user + system) / ticks)
                reading.gauge("process_resident_memory_bytes", [], rssPages * Double(sysconf(Int32(_SC_PAGESIZE))))
                if let boot = bootTime() { reading.gauge("process_start_time_seconds", [], boot + start / ticks) }
            }
        }
        reading.gauge("process_open_fds", [], Double(openDescriptors()))
    }

    private static func contents(_ path: String) -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if count < 0 && errno == EINTR { continue }
            guard count > 0 else { break }
            bytes += chunk[..<count]
        }
        return bytes
    }

    /// btime from /proc/stat: when the machine booted, seconds since 1970.
    private static func bootTime() -> Double? {
        guard let stat = contents("/proc/stat") else { return nil }
        for line in stat.split(separator: UInt8(ascii: "\n")) where line.starts(with: "btime ".utf8) {
            return Double(String(decoding: line.dropFirst(6), as: UTF8.self))
        }
        return nil
    }

    private static func openDescriptors() -> Int {
        guard let directory = opendir("/proc/self/fd") else { return 0 }
        defer { closedir(directory) }
        var count = 0
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { $0.first }
            if name != UInt8(ascii: ".") { count += 1 }
        }
        // The directory's own descriptor is not one of the process's.
        return max(0, count - 1)
    }
}
