import CKeyholeSystemd

#if canImport(Glibc)
import Glibc
#endif

/// Tells systemd how keyholed is doing (sd_notify): ready, reloading, stopping, a status line,
/// watchdog pings. Without NOTIFY_SOCKET (not started by systemd as Type=notify) every call does nothing.
public struct SystemdNotifier: Sendable {
    /// Whether systemd listens (NOTIFY_SOCKET was set at start).
    public let isEnabled: Bool

    /// Reads NOTIFY_SOCKET once; it stays set, for the notifications after READY=1.
    public init() {
        isEnabled = getenv("NOTIFY_SOCKET") != nil
    }

    /// Sends `assignments` (`KEY=value` lines) as they are; false when systemd does not listen or the
    /// message could not be sent.
    @discardableResult
    public func send(_ assignments: String) -> Bool {
        guard isEnabled else { return false }
        return sd_notify(0, assignments) > 0
    }

    /// Start-up finished: the state is recovered and the socket served.
    public func ready(status: String) { send("READY=1\nSTATUS=\(Self.line(status))") }

    /// A short human status for `systemctl status`.
    public func status(_ status: String) { send("STATUS=\(Self.line(status))") }

    /// A reload begins; `ready(status:)` ends it.
    public func reloading() {
        var now = timespec()
        clock_gettime(CLOCK_MONOTONIC, &now)
        send("RELOADING=1\nMONOTONIC_USEC=\(Int64(now.tv_sec) * 1_000_000 + Int64(now.tv_nsec) / 1000)")
    }

    /// Shutdown begins.
    public func stopping(status: String) { send("STOPPING=1\nSTATUS=\(Self.line(status))") }

    /// keyholed is alive (WatchdogSec=).
    public func watchdog() { send("WATCHDOG=1") }

    /// The watchdog interval systemd expects pings within (WATCHDOG_USEC, for this process), or nil.
    public func watchdogInterval() -> Duration? {
        var microseconds: UInt64 = 0
        guard sd_watchdog_enabled(0, &microseconds) > 0, microseconds > 0 else { return nil }
        return .microseconds(Int64(clamping: microseconds))
    }

    /// One line: a newline would start another assignment.
    static func line(_ text: String) -> String {
        String(text.unicodeScalars.prefix(200).map { $0.value < 0x20 || $0.value == 0x7F ? " " : Character($0) })
    }
}
