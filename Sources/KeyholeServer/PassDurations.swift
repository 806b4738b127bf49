import CoreMetrics
import NIOCore

/// The durations of the requests one `SocketLoop` answers in a pass, recorded together as the pass
/// ends (`SocketLoop.passEnding`), with one clock read for all of them.
///
/// A clock read cost a request about 3 % of its CPU on this project's virtual machine (a ping or a
/// session.get, measured side by side), more than the metrics' atomic additions. Every request
/// answered within a pass started when the pass did (`SocketLoop.passTime`), so its duration is the
/// pass's time so far, and the pass's end is when its answers are all made and about to be sent:
/// what METRICS.md says the histogram measures, read once instead of once per answer. Answers that
/// come later (a commit's, a task's) are recorded when they come, with a clock read of their own.
///
/// Confined to its loop's thread.
final class PassDurations: @unchecked Sendable {
    /// The histograms of the pass's answers so far, one entry per answer.
    private var pending: [Timer] = []
    /// When they started: the pass's start.
    private var started = NIODeadline.uptimeNanoseconds(0)

    init() {
        pending.reserveCapacity(256)
    }

    /// Records an answer's duration from `started` into `timer` when the pass ends.
    func add(_ timer: Timer, since started: NIODeadline) {
        if started != self.started {
            // Another pass's start (one a request waited through): the answers of the pass before,
            // if any were left, are settled first.
            record()
            self.started = started
        }
        pending.append(timer)
    }

    /// Records every pending duration with one clock read: the pass is ending.
    func record() {
        guard !pending.isEmpty else { return }
        let duration = Int64(truncatingIfNeeded: NIODeadline.now().uptimeNanoseconds &- started.uptimeNanoseconds)
        for timer in pending { timer.recordNanoseconds(duration) }
        pending.removeAll(keepingCapacity: true)
    }
}
