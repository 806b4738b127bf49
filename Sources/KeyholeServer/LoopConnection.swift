import KeyholeProtocol
import KeyholeSocketLoop
import Logging
import NIOCore

/// Serves one connection on keyholed's own loop (`[server] loop = "epoll"`, REQUEST_LOOP.md): the
/// socket's events go to `ServedConnection`'s serving, which writes answers straight into the socket's
/// output; the loop sends them once per pass.
final class LoopConnection: SocketConnectionDelegate, ServedConnection {
    let core: ServerCore
    let limits: ConnectionLimits
    var decoder: FrameDecoder
    var machine: ConnectionStateMachine
    /// The server's logger with this connection's metadata. Its level is the server's: the loop's
    /// connections share one answer per pass to whether requests log (`PassLogLevel`), so a
    /// connection must not set a level of its own.
    var logger: Logger {
        didSet { requestContext = nil }
    }
    var requestContext: RequestContext?
    var access = ConnectionAccess()
    var tasks = ConnectionTasks()
    var closing = false
    var answeredInPlace = false
    /// The socket; `nil` once closed.
    private var connection: SocketConnection?
    private let loop: SocketLoop
    /// The loops serving the listening socket, all of which hold connections of the peer's uid.
    private let group: SocketLoopGroup
    /// At its uid's limit, waiting for the loops to read the hang-ups already signalled (not reading).
    private var admissionDeferred = false
    /// A stand-in for `connection.output` once the socket is gone, so that late answers have somewhere to go.
    private var detachedOutput = ByteBuffer()
    private var timers: [NIODeadline?] = Array(repeating: nil, count: ConnectionTimer.allCases.count)
    let delivery: AnswerDelivery
    let passDurations: PassDurations?
    private let passLogLevel: PassLogLevel
    /// The loop's count of bytes written this pass.
    private let passBytes: PassBytes
    var now: NIODeadline { loop.passTime }
    var logsRequests: Bool { passLogLevel.logsDebug(logger, pass: loop.passTime) }

    /// Serves `connection`, held to `limits` for its whole life.
    init(
        connection: SocketConnection, loop: SocketLoop, group: SocketLoopGroup, core: ServerCore,
        limits: KeyholeServer.Configuration, logger: Logger
    ) {
        self.connection = connection
        self.loop = loop
        self.group = group
        self.core = core
        self.logger = logger
        self.limits = ConnectionLimits(limits)
        self.decoder = FrameDecoder(maxFrameBytes: limits.maxFrameBytes)
        self.machine = ConnectionStateMachine(limits: limits)
        self.delivery = core.answerDelivery(for: loop)
        let passes = core.passes(of: loop)
        self.passDurations = passes.durations
        self.passLogLevel = passes.logLevel
        self.passBytes = passes.bytes
        setTimer(.idle, at: .now() + limits.idleTimeout)
    }

    // MARK: The socket's events

    func received(_ bytes: ByteBuffer, on connection: SocketConnection) {
        received(bytes)
        guard !connection.isClosed else { return }
        // Reading goes on while the state machine lets it (back pressure, or reading ended).
        if !machine.readRequested(framesWaiting: decoder.hasCompleteFrame) { connection.setReading(false) }
    }

    func inputClosed(on connection: SocketConnection) {
        // The client finished sending: answer what it sent, then close.
        stopReading(serve: true)
    }

    func writabilityChanged(on connection: SocketConnection) {
        if machine.writabilityChanged(connection.isWritable, now: now, framesWaiting: decoder.hasCompleteFrame) { resumeReading() }
        if connection.isWritable { pump() }
    }

    func deadlineReached(now: NIODeadline, on connection: SocketConnection) {
        for kind in ConnectionTimer.allCases {
            guard let deadline = timers[kind.rawValue], deadline <= now else { continue }
            timers[kind.rawValue] = nil
            timerFired(kind)
            guard !connection.isClosed else { return }
        }
        armEarliest()
    }

    func quiesce(on connection: SocketConnection) {
        quiesce(serve: true)
    }

    func closed(_ connection: SocketConnection) {
        detachedOutput = ByteBuffer()
        self.connection = nil
        connectionClosed()
        core.stats.closeConnection()
    }

    // MARK: ServedConnection's I/O

    var outbound: ByteBuffer {
        get { connection?.output ?? detachedOutput }
        _modify {
            if let connection {
                yield &connection.output
            } else {
                yield &detachedOutput
            }
        }
    }

    var isWritable: Bool { connection?.isWritable ?? false }

    var unsentBytes: Int { connection?.unsentBytes ?? 0 }

    /// The socket's output is cleared by the loop as it sends it: nothing to do.
    func prepareOutbound() {}

    func outboundWritten(_ bytes: Int) {
        // Added to the server's count as the loop's pass ends (`PassBytes`).
        passBytes.pending.pointee &+= bytes
        connection?.outputAdded()
    }

    /// The loop sends every connection's output at the end of its pass.
    func flushIfNeeded() {}

    func resumeReading() {
        guard !admissionDeferred else { return }
        connection?.setReading(true)
    }

    func deferAdmission(of peer: PeerCredentials) -> Bool {
        guard let connection else { return false }
        admissionDeferred = true
        connection.setReading(false)
        let decide = confined { (served, _: Void) in
            // Closed meanwhile (the peer left, or shutdown): nothing to decide.
            guard let connection = served.connection else { return }
            served.admissionDeferred = false
            served.admit(peer, afterWaiting: true)
            if served.access.countedUID != nil, served.machine.state == .open { connection.setReading(true) }
        }
        group.afterEveryLoopWaited(thenOn: loop) { decide(()) }
        return true
    }

    var holdsRefusals: Bool { true }

    func pauseAccepting() {
        // A refusal decided later (`deferAdmission`) is outside the accepts' pass: the pause then
        // follows the next pass that accepts.
        loop.pauseAccepting()
    }

    func holdRefused(until deadline: NIODeadline) {
        connection?.setReading(false)
        for timer in ConnectionTimer.allCases { setTimer(timer, at: timer == .refusalHeld ? deadline : nil) }
    }

    func closeNow() {
        connection?.close()
    }

    func closeAfterWrites() {
        connection?.closeAfterWrites()
    }

    func setTimer(_ kind: ConnectionTimer, at deadline: NIODeadline?) {
        timers[kind.rawValue] = deadline
        armEarliest()
    }

    func hasTimer(_ kind: ConnectionTimer) -> Bool { timers[kind.rawValue] != nil }

    /// The loop's sweep looks at one deadline per connection: the earliest of its timers.
    private func armEarliest() {
        guard let connection else { return }
        var earliest: NIODeadline?
        for case let deadline? in timers where earliest.map({ deadline < $0 }) ?? true {
            earliest = deadline
        }
        if connection.deadline != earliest { connection.deadline = earliest }
    }

    var executor: @Sendable (@escaping @Sendable () -> Void) -> Void {
        let loop = self.loop
        return { loop.execute($0) }
    }

    func confined<Value>(_ body: @escaping (LoopConnection, Value) -> Void) -> @Sendable (Value) -> Void {
        let loop = self.loop
        let confined = LoopConfined(value: (self, body))
        return { value in
            assert(loop.inLoop, "a confined closure ran off its loop")
            confined.value.1(confined.value.0, value)
        }
    }
}
