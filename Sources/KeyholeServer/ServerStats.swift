import KeyholeProtocol
import NIOCore
import Synchronization

/// Counters behind the `stats` operation, updated lock-free from every event loop.
///
/// Per-operation counters exist only for operations the server offers, so hostile op names cannot
/// grow memory.
public final class ServerStats: Sendable {
    /// One monotonically increasing count.
    final class Counter: Sendable {
        private let value = Atomic<Int>(0)
        func add(_ amount: Int = 1) { value.add(amount, ordering: .relaxed) }
        func subtract(_ amount: Int = 1) { value.subtract(amount, ordering: .relaxed) }
        var current: Int { value.load(ordering: .relaxed) }
    }

    let startedAt = NIODeadline.now()
    let openConnections = Atomic<Int>(0)
    let totalConnections = Counter()
    let rejectedConnections = Counter()
    /// Connections closed because their unsent responses passed `maxUnsentBytes`.
    let slowReaders = Counter()
    /// Requests read whose answer waits for work done elsewhere (a commit, a task, the database);
    /// one answered as it is read (`stats` itself, say) is never counted.
    let inFlight = Counter()
    let bytesIn = Counter()
    let bytesOut = Counter()
    private let requestsByOp: [String: Counter]
    private let errorsByCode: [String: Counter]

    /// Members other components add to the `stats` result (the store's figures, say).
    private let extra: @Sendable () -> [String: JSONValue]

    init(operations: some Sequence<String>, extra: @escaping @Sendable () -> [String: JSONValue] = { [:] }) {
        self.extra = extra
        requestsByOp = Dictionary(uniqueKeysWithValues: operations.map { ($0, Counter()) })
        errorsByCode = Dictionary(uniqueKeysWithValues: ProtocolError.Code.allCases.map { ($0.rawValue, Counter()) })
    }

    /// The counter of requests for `op`, when the server offers it.
    func requestCounter(for op: String) -> Counter? { requestsByOp[op] }

    /// Counts an error response.
    func countError(_ code: ProtocolError.Code) { errorsByCode[code.rawValue]?.add() }

    /// Milliseconds since the server started.
    var uptimeMs: Int64 {
        Int64((NIODeadline.now() - startedAt).nanoseconds / 1_000_000)
    }

    /// Takes a connection slot, or returns `false` when `limit` connections are already open.
    func openConnection(limit: Int) -> Bool {
        let open = openConnections.wrappingAdd(1, ordering: .relaxed).newValue
        guard open <= limit else {
            openConnections.subtract(1, ordering: .relaxed)
            rejectedConnections.add()
            return false
        }
        totalConnections.add()
        return true
    }

    /// Gives back a slot taken by `openConnection`.
    func closeConnection() { openConnections.subtract(1, ordering: .relaxed) }

    /// The `stats` result (PROTOCOL.md section 7).
    public var snapshot: [String: JSONValue] {
        let builtin: [String: JSONValue] = [
            "uptime_ms": .int(uptimeMs),
            "connections": [
                "open": .int(Int64(openConnections.load(ordering: .relaxed))),
                "total": .int(Int64(totalConnections.current)),
                "rejected": .int(Int64(rejectedConnections.current)),
                "slow_readers": .int(Int64(slowReaders.current)),
            ],
            "requests": .object(requestsByOp.mapValues { .int(Int64($0.current)) }),
            "in_flight": .int(Int64(inFlight.current)),
            "errors": .object(errorsByCode.compactMapValues { $0.current > 0 ? .int(Int64($0.current)) : nil }),
            "bytes": ["in": .int(Int64(bytesIn.current)), "out": .int(Int64(bytesOut.current))],
        ]
        return builtin.merging(extra()) { builtin, _ in builtin }
    }
}
