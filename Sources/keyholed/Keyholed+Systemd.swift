import KeyholeServer
import KeyholeStore
import KeyholeSystemd
import Logging
import NIOCore
import ServiceLifecycle
import Synchronization

extension Keyholed {
    /// Structured entries when stderr is the journal (JOURNAL_STREAM), plain lines otherwise.
    static func bootstrapLogging(level: LogLevelControl) {
        if JournalLogHandler.isStandardErrorJournal {
            LoggingSystem.bootstrap { label in
                JournalLogHandler(identifier: "keyholed", level: level.level(for: label), message: LineLogHandler.message)
            }
        } else {
            LoggingSystem.bootstrap { label in LineLogHandler(label: label, level: level.level(for: label)) }
        }
    }

    /// The watchdog's test of a keyholed able to work: every event loop runs a task within the
    /// deadline, and the log's committer is not stuck in one write or sync for longer than `interval`.
    static func healthCheck(server: KeyholeServer, store: Store?, interval: Duration) -> @Sendable (Duration) async -> String? {
        { deadline in
            if let busy = store?.committerBusy(), busy > interval {
                return "the log writer has been in one write or sync for \(busy.components.seconds)s"
            }
            return await eventLoopsAnswer(server.servingLoops, within: deadline)
        }
    }

    /// nil once every loop ran an empty task (`loops` run a closure each on one loop); a reason when
    /// one did not within `deadline`. Never waits past the deadline, even for a loop that never answers.
    static func eventLoopsAnswer(_ loops: [@Sendable (@escaping @Sendable () -> Void) -> Void], within deadline: Duration) async -> String? {
        // None yet: the server has not started listening.
        guard !loops.isEmpty else { return nil }
        let tally = Tally()
        return await withCheckedContinuation { (continuation: CheckedContinuation<String?, Never>) in
            let timer = Task {
                try? await Task.sleep(for: deadline)
                if let answered = tally.finish() {
                    continuation.resume(returning: "\(loops.count - answered) of \(loops.count) event loops did not answer within \(deadline)")
                }
            }
            for execute in loops {
                execute {
                    if tally.answer(of: loops.count), tally.finish() != nil {
                        timer.cancel()
                        continuation.resume(returning: nil)
                    }
                }
            }
        }
    }

    /// The loops that answered, and whether the check already has its result (it is given once).
    private final class Tally: Sendable {
        private let state = Mutex<(answered: Int, finished: Bool)>((0, false))

        /// Counts one answer; true when it is the last of `count`.
        func answer(of count: Int) -> Bool {
            state.withLock { state in
                state.answered += 1
                return state.answered == count
            }
        }

        /// The number that answered, for the first caller only.
        func finish() -> Int? {
            state.withLock { state in
                guard !state.finished else { return nil }
                state.finished = true
                return state.answered
            }
        }
    }
}

/// Keeps `systemctl status` current (STATUS=, every few seconds, only when it changed) and says
/// STOPPING=1 as soon as shutdown begins. Listed last in the service group, so it is the first told
/// to shut down.
final class SystemdStatus: Service, Sendable {
    private let notifier: SystemdNotifier
    private let status: @Sendable () -> String
    private let interval: Duration

    init(notifier: SystemdNotifier, interval: Duration = .seconds(5), status: @escaping @Sendable () -> String) {
        self.notifier = notifier
        self.status = status
        self.interval = interval
    }

    func run() async {
        var last = ""
        while !Task.isShuttingDownGracefully && !Task.isCancelled {
            do {
                try await cancelWhenGracefulShutdown { [interval] in try await Task.sleep(for: interval) }
            } catch {
                break
            }
            let current = status()
            if current != last {
                notifier.status(current)
                last = current
            }
        }
        notifier.stopping(status: "stopping: answering the requests already read")
    }
}
