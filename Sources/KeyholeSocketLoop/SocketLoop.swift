import CKeyholeLinux
import NIOCore
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

/// One thread serving Unix-socket connections on epoll, without SwiftNIO's channel pipeline
/// (Sources/KeyholeServer/REQUEST_LOOP.md says why and how).
///
/// Each pass: wait for events (or the next deadline); read what is ready and hand it to the
/// connections' delegates; run the jobs other threads queued (`execute`); check deadlines; then send
/// every connection's new output once. Everything but `execute` happens on the loop's own thread:
/// that confinement is what makes the class safe to share, hence `@unchecked Sendable`.
public final class SocketLoop: @unchecked Sendable {
    /// Sizes and intervals; the defaults suit keyholed.
    public struct Configuration: Sendable {
        /// The most one read takes from a socket (one read per readiness, so busy connections share).
        public var readBytes = 64 * 1024
        /// Writability's marks (`SocketIOState`), as SwiftNIO's defaults.
        public var writeMarks = SocketIOState.Marks(low: 32 * 1024, high: 64 * 1024)
        /// A connection's output buffer is kept for its next answers up to this size.
        public var keptOutputBytes = 16 * 1024
        /// Deadlines are checked by a sweep over the loop's connections, at most this often: no timer
        /// per connection, and a deadline is met at most this late.
        public var sweepInterval = TimeAmount.milliseconds(100)
        /// Connections accepted per wake-up before the loop serves others.
        public var acceptsPerWake = 16
        /// Out of descriptors (EMFILE), accepting pauses this long instead of spinning.
        public var acceptPause = TimeAmount.milliseconds(100)
        /// After a pass that refused a connection at connect (`pauseAccepting`), accepting pauses this
        /// long: a client churning through refused connections then wakes the loop once per pause,
        /// not once per connection, and waits for its refusals (REQUEST_LOOP.md, "Churn"). Each
        /// further pass in a row that refuses doubles the pause, up to `maxRefusalPause`; a pass that
        /// accepts without refusing brings it back to this.
        public var refusalPause = TimeAmount.milliseconds(1)
        public var maxRefusalPause = TimeAmount.milliseconds(8)
        /// Events one `epoll_wait` returns at most (more while `afterNextWait` callbacks wait).
        public var eventsPerWait = 256

        public init() {}
    }

    public let configuration: Configuration
    /// The thread's name, `keyhole-loop-N`.
    public let name: String
    let poll: CInt
    private let wake: CInt
    private let jobs = Mutex<[@Sendable () -> Void]>([])
    private let ended = Atomic<Bool>(false)
    private var spareJobs: [@Sendable () -> Void] = []

    // The loop thread's own state.
    var connections: [SocketConnection?] = []
    var generation: UInt32 = 0
    var flushList: [SocketConnection] = []
    private var flushing: [SocketConnection] = []
    private var readBuffer = ByteBuffer()
    var listener: Listener?
    private var nextSweep: NIODeadline?
    private var lastSweep = NIODeadline.now()
    /// When the current pass began (read once, as the wait ended): the time for everything the pass
    /// does, so that a request does not read the clock for its timers. Read on the loop's thread only.
    public private(set) var passTime = NIODeadline.now()
    /// Called on the loop's thread as a pass ends: after its events and jobs, before its output is
    /// sent, and again after (for requests a flush let through). For what costs less once a pass than
    /// once a request (the requests' durations, with one clock read). Set on the loop's thread.
    public var passEnding: (() -> Void)?
    var quiescing = false
    /// The listening socket has connections waiting (accepted at the end of the pass).
    private var acceptReady = false
    /// A connection accepted this pass was refused (`pauseAccepting`).
    var refusedThisPass = false
    /// The pause after the next pass that refuses (`Configuration.refusalPause`).
    var nextRefusalPause: TimeAmount
    private var finished = false
    /// Connections open on this loop.
    public internal(set) var connectionCount = 0
    private var onFinished: (@Sendable () -> Void)?
    /// `afterNextWait` callbacks for the next wait, and those of the wait under way.
    private var waitRequested: [@Sendable () -> Void] = []
    private var waitArmed: [@Sendable () -> Void] = []

    private static let wakeTag = UInt64.max
    static let listenerTag = UInt64.max - 1

    /// A loop ready to `start`.
    public init(name: String, configuration: Configuration = Configuration()) throws(SocketLoopError) {
        self.name = name
        self.configuration = configuration
        nextRefusalPause = configuration.refusalPause
        // Both made before either is stored: an init that throws once every stored property is set
        // still runs deinit, which would close `poll` a second time, perhaps someone else's by then.
        let poll = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard poll >= 0 else { throw SocketLoopError("epoll_create1", errno) }
        let wake = eventfd(0, Int32(EFD_NONBLOCK) | Int32(EFD_CLOEXEC))
        guard wake >= 0 else {
            let code = errno
            Glibc.close(poll)
            throw SocketLoopError("eventfd", code)
        }
        self.poll = poll
        self.wake = wake
        var event = epoll_event()
        event.events = EPOLLIN.rawValue
        event.data.u64 = Self.wakeTag
        epoll_ctl(poll, EPOLL_CTL_ADD, wake, &event)
        spareJobs.reserveCapacity(64)
    }

    deinit {
        Glibc.close(poll)
        Glibc.close(wake)
    }

    /// Starts the loop's thread; `finished` is called on it when the loop ends.
    public func start(finished: @escaping @Sendable () -> Void) {
        onFinished = finished
        let body = Unmanaged.passRetained(ThreadBody { self.run() }).toOpaque()
        var thread = pthread_t()
        let created = pthread_create(&thread, nil, { argument in
            Unmanaged<ThreadBody>.fromOpaque(argument!).takeRetainedValue().run()
            return nil
        }, body)
        precondition(created == 0, "pthread_create failed: \(created)")
        _ = name.withCString { ckeyhole_name_thread(thread, $0) }
        pthread_detach(thread)
    }

    /// Whether the loop's thread has ended (jobs queued from now on never run).
    public var hasEnded: Bool { ended.load(ordering: .acquiring) }

    /// Whether the caller runs on this loop's thread.
    public var inLoop: Bool {
        pthread_getspecific(Self.currentKey) == Unmanaged.passUnretained(self).toOpaque()
    }

    /// The loop whose thread the caller runs on, if any.
    public static var current: SocketLoop? {
        guard let pointer = pthread_getspecific(currentKey) else { return nil }
        return Unmanaged<SocketLoop>.fromOpaque(pointer).takeUnretainedValue()
    }

    private static let currentKey: pthread_key_t = {
        var key = pthread_key_t()
        precondition(pthread_key_create(&key, nil) == 0, "pthread_key_create failed")
        return key
    }()

    /// Runs `job` on the loop's thread, after the reads of the pass it is in (or the next one), in
    /// the order queued. Safe from any thread.
    public func execute(_ job: @escaping @Sendable () -> Void) {
        let first = jobs.withLock { jobs in
            jobs.append(job)
            return jobs.count == 1
        }
        // The loop looks at its queue before it sleeps: only another thread must wake it.
        if first, !inLoop {
            // `wake` stays open until deinit, and nobody can call this then: the number written to is
            // always this loop's eventfd, never a file opened since with a reused number.
            var one: UInt64 = 1
            _ = Glibc.write(wake, &one, 8)
        }
    }

    /// Runs `body` on the loop's thread once the loop has waited on epoll, from a wait that began
    /// after this call, and has handled every event that wait returned: whatever the kernel had
    /// signalled to this loop before the call (a peer's hang-up, say) has been seen by then. Safe from
    /// any thread. A loop that ends runs those still waiting as it ends (nothing is left to read);
    /// one asked from another thread as the loop ends may never run.
    public func afterNextWait(_ body: @escaping @Sendable () -> Void) {
        if inLoop {
            waitRequested.append(body)
        } else {
            execute { self.waitRequested.append(body) }
        }
    }

    // MARK: The loop

    private func run() {
        pthread_setspecific(Self.currentKey, Unmanaged.passUnretained(self).toOpaque())
        var capacity = configuration.eventsPerWait
        var events = UnsafeMutablePointer<epoll_event>.allocate(capacity: capacity)
        while !finished {
            // Requested before this wait began: its events settle them.
            if !waitRequested.isEmpty {
                waitArmed.append(contentsOf: waitRequested)
                waitRequested.removeAll(keepingCapacity: true)
            }
            // Room for every descriptor epoll watches (each is on its ready list once at most: the
            // connections, the listener, the eventfd), so that a wait that settles `afterNextWait`
            // returns all that is ready however busy the loop: settled on this very pass.
            if !waitArmed.isEmpty, capacity <= connectionCount + 2 {
                events.deallocate()
                capacity = connectionCount + 3
                events = .allocate(capacity: capacity)
            }
            let ready = epoll_wait(poll, events, Int32(capacity), waitArmed.isEmpty ? waitMilliseconds() : 0)
            if ready < 0 {
                precondition(errno == EINTR, "epoll_wait failed: \(String(cString: strerror(errno)))")
                continue
            }
            passTime = .now()
            for index in 0..<Int(ready) {
                handle(events[index])
            }
            // Fewer events than room for them: the wait returned every one ready, none is left behind.
            if Int(ready) < capacity, !waitArmed.isEmpty { settleWaits() }
            runJobs()
            if let nextSweep, nextSweep <= passTime { sweep(now: passTime) }
            passEnding?()
            flushAll()
            // Accepted last, once the pass's hang-ups are closed: a client that closes a connection and
            // opens another is not refused for one it no longer has (max_connections_per_uid).
            if acceptReady {
                acceptReady = false
                acceptAll()
                flushAll()  // a refusal written to one just accepted
            } else if let resumesAt = listener?.pausedUntil, resumesAt <= passTime {
                // What waited meanwhile is accepted now, not after one more wake-up.
                startListening()
                acceptAll()
                flushAll()
            }
            // Again for what the flushes let through: requests held back by a connection that could
            // not write, served as it became writable.
            passEnding?()
            // Not with jobs queued: one may be the store's inline commit, which must run.
            if quiescing, connectionCount == 0, jobs.withLock({ $0.isEmpty }) { finished = true }
        }
        events.deallocate()
        stopListening()
        // Nothing is left to read: whoever waits on this loop's next wait may go on.
        waitArmed.append(contentsOf: waitRequested)
        waitRequested.removeAll()
        settleWaits()
        pthread_setspecific(Self.currentKey, nil)
        ended.store(true, ordering: .releasing)
        onFinished?()
        onFinished = nil
    }

    /// How long epoll may wait: not at all with jobs queued, else until the next sweep or the
    /// listener's resumption.
    private func waitMilliseconds() -> Int32 {
        if jobs.withLock({ !$0.isEmpty }) { return 0 }
        // A paused listener resumes on time, not at the next sweep.
        var until = nextSweep
        if let resumesAt = listener?.pausedUntil, until.map({ resumesAt < $0 }) ?? true { until = resumesAt }
        guard let until else { return -1 }
        let nanoseconds = until.uptimeNanoseconds &- NIODeadline.now().uptimeNanoseconds
        guard nanoseconds > 0, nanoseconds < UInt64.max / 2 else { return 0 }
        return Int32(clamping: (nanoseconds + 999_999) / 1_000_000)
    }

    private func handle(_ event: epoll_event) {
        let tag = event.data.u64
        if tag == Self.wakeTag {
            var count: UInt64 = 0
            _ = Glibc.read(wake, &count, 8)
            return
        }
        if tag == Self.listenerTag {
            acceptReady = true
            return
        }
        let fd = Int(UInt32(truncatingIfNeeded: tag))
        guard fd < connections.count, let connection = connections[fd],
            connection.generation == UInt32(truncatingIfNeeded: tag >> 32)
        else { return }
        let events = event.events
        if events & EPOLLOUT.rawValue != 0 { connection.flush() }
        if events & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0, !connection.isClosed {
            if connection.io.watchingReads { read(connection) }
            // Hung up (the peer closed both ways) or failed: nobody reads answers any more, and the
            // socket would be reported ready on every pass.
            if events & (EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 { connection.close() }
        }
    }

    private func read(_ connection: SocketConnection) {
        // Reuses the buffer when the last reader let go of it; else this allocates a new one.
        readBuffer.clear(minimumCapacity: configuration.readBytes)
        var result = 0
        readBuffer.writeWithUnsafeMutableBytes(minimumWritableBytes: configuration.readBytes) { space in
            result = Glibc.read(connection.fd, space.baseAddress!, space.count)
            return max(result, 0)
        }
        if result > 0 {
            connection.delegate?.received(readBuffer, on: connection)
        } else if result == 0 {
            connection.apply(connection.io.endOfInput())
            connection.delegate?.inputClosed(on: connection)
        } else if errno != EAGAIN, errno != EINTR {
            connection.close()
        }
    }

    private func settleWaits() {
        let settled = waitArmed
        waitArmed.removeAll(keepingCapacity: true)
        for body in settled { body() }
    }

    private func runJobs() {
        // A job may queue more (an answer delivered by a commit): a few rounds, then the rest waits
        // for the next pass, which then does not sleep.
        for _ in 0..<4 {
            jobs.withLock { swap(&spareJobs, &$0) }
            if spareJobs.isEmpty { return }
            for job in spareJobs { job() }
            spareJobs.removeAll(keepingCapacity: true)
        }
    }

    private func flushAll() {
        // A flush that makes a connection writable again lets it serve requests it held back, whose
        // answers join the list meanwhile: sent in the next round.
        while !flushList.isEmpty {
            swap(&flushing, &flushList)
            for connection in flushing where connection.inFlushList {
                connection.flush()
            }
            flushing.removeAll(keepingCapacity: true)
        }
    }

    // MARK: Connections

    func remove(_ connection: SocketConnection) {
        epoll_ctl(poll, EPOLL_CTL_DEL, connection.fd, nil)
        Glibc.close(connection.fd)
        connections[Int(connection.fd)] = nil
        connectionCount -= 1
    }

    func watch(_ connection: SocketConnection) {
        guard !connection.isClosed else { return }
        var event = connection.epollEvent
        epoll_ctl(poll, EPOLL_CTL_MOD, connection.fd, &event)
    }

    func deadlineSet(_ deadline: NIODeadline) {
        let at = max(deadline, lastSweep + configuration.sweepInterval)
        if nextSweep.map({ at < $0 }) ?? true { nextSweep = at }
    }

    private func sweep(now: NIODeadline) {
        lastSweep = now
        nextSweep = nil
        var earliest: NIODeadline?
        for index in connections.indices {
            guard let connection = connections[index], let deadline = connection.deadline else { continue }
            if deadline <= now {
                connection.deadline = nil
                connection.delegate?.deadlineReached(now: now, on: connection)
            } else if earliest.map({ deadline < $0 }) ?? true {
                earliest = deadline
            }
        }
        if let earliest { deadlineSet(earliest) }
    }
}

/// A thread's body, passed through pthread_create's pointer.
private final class ThreadBody {
    let run: () -> Void
    init(_ run: @escaping () -> Void) { self.run = run }
}

/// A system call failed while setting a loop up.
public struct SocketLoopError: Error, CustomStringConvertible {
    public let description: String

    init(_ call: String, _ code: Int32) {
        description = "\(call): \(String(cString: strerror(code)))"
    }
}
