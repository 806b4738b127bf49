import Logging
import ServiceLifecycle

/// systemd's watchdog (WatchdogSec=): pings at half the interval, each only after `check` found
/// keyholed able to work. A keyholed whose event loops or log writer are wedged stops pinging, and
/// systemd kills and restarts it; a keyholed merely slow keeps pinging.
public final class Watchdog: Service, Sendable {
    /// What the watchdog does.
    public struct Configuration: Sendable {
        /// The interval systemd expects pings within (WATCHDOG_USEC).
        public var interval: Duration
        /// Pings are sent this often: half the interval, as systemd advises.
        public var period: Duration { interval / 2 }

        /// A watchdog for systemd's `interval`.
        public init(interval: Duration) { self.interval = interval }
    }

    private let configuration: Configuration
    private let notifier: SystemdNotifier
    private let check: @Sendable (_ deadline: Duration) async -> String?
    private let logger: Logger

    /// - Parameter check: returns why keyholed cannot work (a ping is then withheld), or nil; it must
    ///   answer within `deadline` (a quarter of the interval), or report that as the problem.
    public init(
        configuration: Configuration, notifier: SystemdNotifier, logger: Logger,
        check: @escaping @Sendable (_ deadline: Duration) async -> String?
    ) {
        self.configuration = configuration
        self.notifier = notifier
        self.check = check
        self.logger = logger
    }

    public func run() async {
        logger.info("watchdog.started", metadata: ["interval_ms": "\(Self.milliseconds(configuration.interval))"])
        var withheld = false
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            if let problem = await check(configuration.interval / 4) {
                logger.error("watchdog.withheld", metadata: ["reason": "\(problem)"])
                withheld = true
            } else {
                if withheld { logger.notice("watchdog.resumed") }
                withheld = false
                notifier.watchdog()
            }
            do {
                try await cancelWhenGracefulShutdown { [period = configuration.period] in try await Task.sleep(for: period) }
            } catch {
                return
            }
        }
    }

    static func milliseconds(_ duration: Duration) -> Int64 {
        let parts = duration.components
        return parts.seconds * 1000 + parts.attoseconds / 1_000_000_000_000_000
    }
}
