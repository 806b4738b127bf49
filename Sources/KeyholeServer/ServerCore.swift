import KeyholeProtocol
import KeyholeSocketLoop
import Logging
import NIOCore
import Synchronization

/// What every connection of one server shares: configuration, operations, counters.
final class ServerCore: Sendable {
    /// A class, not a struct: every request takes its entry out of the table, and a struct's copy
    /// retains and releases each of its references (the body's closure, the counter, the metrics).
    final class Entry: Sendable {
        let operation: Operation
        /// The body of a `writing` operation (ping, session.get), taken out of `operation` once: a
        /// request calls it through this stored closure, where binding it out of the enum copied it
        /// (a retain and a release per request). Not `nil` exactly when `operation.body` is
        /// `.writing`: both are constants, set together by `init`.
        let writing: Operation.WritingBody?
        let counter: ServerStats.Counter
        /// The groups of which one must be allowed (`AccessPolicy.Groups`); empty for `ping`.
        let requires: AccessPolicy.Groups
        let metrics: ServerMetrics.Operation

        init(operation: Operation, counter: ServerStats.Counter, requires: AccessPolicy.Groups, metrics: ServerMetrics.Operation) {
            self.operation = operation
            if case .writing(let body) = operation.body { writing = body } else { writing = nil }
            self.counter = counter
            self.requires = requires
            self.metrics = metrics
        }
    }

    /// As the server started: where it listens, its backlog and its operations never change.
    let configuration: KeyholeServer.Configuration
    /// The limits each new connection takes (a reload replaces them; open connections keep theirs).
    let limits: Reloadable<KeyholeServer.Configuration>
    /// The operations' names, looked up by their bytes (`Request.parse`), and their entries, by the
    /// same index.
    let operationNames: OperationNames
    private let entries: [Entry]
    let stats: ServerStats
    let metrics = ServerMetrics()
    /// Who may ask what (a reload may replace the rules).
    let access: AccessControl
    /// Where a connection's peer credentials come from instead of the kernel: a test's.
    private let credentialSource: (@Sendable () -> PeerCredentials?)?
    /// Connections and request buckets per uid.
    let peers = Mutex(PeerLimits())
    /// How often connection events may be logged at notice.
    let logRate = Mutex(LogRate())
    /// One per event loop, made on first use.
    private let deliveries = Mutex<[ObjectIdentifier: AnswerDelivery]>([:])
    private let loopPasses = Mutex<[ObjectIdentifier: Passes]>([:])
    /// What a loop's connections share and the loop settles as each pass ends.
    typealias Passes = (durations: PassDurations, logLevel: PassLogLevel, bytes: PassBytes)

    /// Built-in operations win over `extra` ones of the same name; debug ones exist only when enabled.
    init(
        configuration: KeyholeServer.Configuration, operations extra: [String: Operation],
        statistics: @escaping @Sendable () -> [String: JSONValue] = { [:] }, metrics: (@Sendable () -> String)? = nil
    ) {
        var all = extra
        if configuration.enableDebugOperations {
            all.merge(BuiltinOperations.debug) { _, debug in debug }
            if let clock = configuration.testClock {
                all.merge(BuiltinOperations.clock(clock)) { _, debug in debug }
            }
        }
        let names = Set(all.keys).union(["ping", "stats"])
        let stats = ServerStats(operations: names, extra: statistics)
        all.merge(BuiltinOperations.standard(stats: stats, metrics: metrics)) { _, builtin in builtin }
        self.configuration = configuration
        self.limits = Reloadable(configuration)
        self.stats = stats
        self.access = AccessControl(configuration.access)
        self.credentialSource = configuration.credentialSource
        let named = Array(all)
        self.operationNames = OperationNames(named.map(\.key))
        // Dictionary keys differ as strings, so as bytes too: the table keeps every name, at its index.
        precondition(operationNames.names.count == named.count, "operation names repeat")
        self.entries = named.map { name, operation in
            let requires = AccessPolicy.group(of: name).map(AccessPolicy.Groups.init) ?? []
            return Entry(
                operation: operation, counter: stats.requestCounter(for: name)!, requires: requires,
                metrics: ServerMetrics.Operation(op: name))
        }
    }

    /// The entry of `request`'s operation: by the index its parse with `operationNames` found (only
    /// this server's connections parse with that table: the index is package-wide, not public), else
    /// by its name's bytes (a request parsed without the table, or built in code).
    func entry(for request: Request) -> Entry? {
        if let index = request.operationIndex, index < entries.count {
            return entries[index]
        }
        return operationNames.index(of: request.op).map { entries[$0] }
    }

    /// Whether `event` may be logged at its full level now, within the server's log rate (`LogRate`);
    /// when it may, `metadata` says how many were held back since the last one.
    func admitLog(_ event: String, metadata: inout Logger.Metadata) -> Bool {
        guard let suppressed = logRate.withLock({ $0.admit(event, now: .now()) }) else { return false }
        if suppressed > 0 { metadata["suppressed"] = "\(suppressed)" }
        return true
    }

    /// The credentials of `channel`'s peer.
    func credentials(_ channel: any Channel) -> EventLoopFuture<PeerCredentials?> {
        if let credentialSource { return channel.eventLoop.makeSucceededFuture(credentialSource()) }
        return PeerCredentials.read(from: channel)
    }

    /// The credentials of the peer of socket `fd`.
    func credentials(ofSocket fd: CInt) -> PeerCredentials? {
        if let credentialSource { return credentialSource() }
        return PeerCredentials.read(fromSocket: fd)
    }

    /// The delivery of pending answers to `eventLoop`, shared by its connections.
    func answerDelivery(for eventLoop: any EventLoop) -> AnswerDelivery {
        answerDelivery(for: ObjectIdentifier(eventLoop)) { eventLoop.execute($0) }
    }

    /// The request durations of `loop`'s passes (`PassDurations`), its log level judged once a pass
    /// (`PassLogLevel`) and the bytes its connections write (`PassBytes`), shared by its connections,
    /// set up when its first connection is: the durations and the bytes recorded as each pass ends.
    func passes(of loop: SocketLoop) -> Passes {
        // On the loop's thread, as a connection it accepted is set up: before its first request.
        assert(loop.inLoop, "a loop's pass durations, log level and byte count are set up on its own thread")
        return loopPasses.withLock { all in
            // A loop with no hook is new, even at the address of one that ended: it gets its own.
            if let passes = all[ObjectIdentifier(loop)], loop.passEnding != nil { return passes }
            let durations = PassDurations(), bytes = PassBytes(total: stats.bytesOut)
            let passes = (durations: durations, logLevel: PassLogLevel(), bytes: bytes)
            all[ObjectIdentifier(loop)] = passes
            loop.passEnding = {
                durations.record()
                bytes.record()
            }
            return passes
        }
    }

    /// The delivery of pending answers to `loop`, shared by its connections.
    func answerDelivery(for loop: SocketLoop) -> AnswerDelivery {
        answerDelivery(for: ObjectIdentifier(loop)) { loop.execute($0) }
    }

    private func answerDelivery(
        for loop: ObjectIdentifier, execute: @escaping @Sendable (@escaping @Sendable () -> Void) -> Void
    ) -> AnswerDelivery {
        deliveries.withLock { deliveries in
            if let delivery = deliveries[loop] { return delivery }
            let delivery = AnswerDelivery(execute: execute)
            deliveries[loop] = delivery
            return delivery
        }
    }
}
