import Logging
import Synchronization

/// keyholed's log level, read by every log handler at each event and set again by a reload: one
/// relaxed atomic load per check, since debug checks sit on request paths.
final class LogLevelControl: Sendable {
    private static let levels = Logger.Level.allCases
    private let index: Atomic<Int>

    init(_ level: Logger.Level) {
        index = Atomic(Self.levels.firstIndex(of: level) ?? 0)
    }

    var level: Logger.Level {
        get { Self.levels[index.load(ordering: .relaxed)] }
        set { index.store(Self.levels.firstIndex(of: newValue) ?? 0, ordering: .relaxed) }
    }

    /// The label of the service group's logger, which logs at notice or above whatever the level:
    /// its info lines (each service started and stopped) are noise to an operator.
    static let lifecycleLabel = "keyholed.lifecycle"

    /// The level function for a logger labelled `label`.
    func level(for label: String) -> @Sendable () -> Logger.Level {
        if label == Self.lifecycleLabel {
            return { [self] in max(self.level, Logger.Level.notice) }
        }
        return { [self] in self.level }
    }
}
