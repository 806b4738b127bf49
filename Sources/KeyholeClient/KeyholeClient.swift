import KeyholeProtocol
import NIOCore
import NIOPosix
import Synchronization

/// An async client for keyholed (Protocol/PROTOCOL.md): one connection, many calls in flight on it,
/// answers matched by id, and the reconnect and re-send rules of section 8.
///
/// ```swift
/// let client = KeyholeClient()                       // $KEYHOLE_SOCKET, else /run/keyhole/keyhole.sock
/// let session = try await client.getSession(token)   // keyholed's errors: ProtocolError
/// ```
///
/// - The socket is the one given, else `$KEYHOLE_SOCKET`, else `/run/keyhole/keyhole.sock`.
/// - Each call has a deadline (default 5 s) covering connecting, waiting to reconnect, writing and the
///   answer.
/// - The connection opens on the first need and again after it ended (keyholed restarted, closed an
///   idle connection, or the socket was briefly gone), with waits between failed attempts doubling
///   from 10 ms to at most 500 ms, within the call's deadline.
/// - A request the connection ended before writing is sent on a new connection; one written and left
///   unanswered (or answered `shutting_down`) is sent again once if its operation is safe to repeat
///   (`KeyholeOperations`), else the call fails with `connection_lost`.
///
/// Calls throw `ProtocolError` for keyholed's error answers (an unknown code reads as `internal`) and
/// `KeyholeClientError` for the client's own failures (`unavailable`, `connection_lost`, `timeout`,
/// `protocol_error`).
public final class KeyholeClient: Sendable {
    /// The socket this client talks to.
    public let socketPath: String
    /// The client's settings.
    public let configuration: Configuration
    let connector: Connector
    /// Request ids, unique over the client's life: a re-send gets a new one.
    private let nextID = Atomic<Int64>(1)

    /// A client for `socketPath` (else `$KEYHOLE_SOCKET`, else `/run/keyhole/keyhole.sock`). Nothing
    /// is opened until the first call.
    public init(socketPath: String? = nil, configuration: Configuration = .init()) {
        self.socketPath = socketPath ?? Configuration.defaultSocketPath()
        self.configuration = configuration
        self.connector = Connector(socketPath: self.socketPath, group: configuration.eventLoopGroup)
    }

    /// A client whose connection is open now: one attempt, `unavailable` at once if it fails (later
    /// calls reconnect within their deadlines as section 8 says).
    ///
    /// - Parameter requestTimeout: each call's deadline (`nil`: none). This entry point keeps its
    ///   earlier default of 30 s; `KeyholeClient(socketPath:configuration:)` has section 8's 5 s. A
    ///   call whose answer does not come in time fails with `timeout`; the connection stays usable
    ///   and a late answer is dropped.
    public static func connect(
        socketPath: String,
        requestTimeout: TimeAmount? = .seconds(30),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws(KeyholeClientError) -> KeyholeClient {
        var configuration = Configuration()
        configuration.deadline = requestTimeout.map(Duration.init)
        configuration.eventLoopGroup = eventLoopGroup
        let client = KeyholeClient(socketPath: socketPath, configuration: configuration)
        try await client.open()
        return client
    }

    /// Opens the connection now rather than on the first call: one attempt, `unavailable` if it fails.
    public func open() async throws(KeyholeClientError) {
        switch await connector.connection(timeout: configuration.deadline) {
        case .success: return
        case .failure(.closed): throw .unavailable("the client is closed")
        case .failure(.cannotConnect(let reason)): throw .unavailable(reason)
        }
    }

    /// Sends a request and returns keyholed's answer, whether a result or one of its errors. An error
    /// with a null id that ended the connection (such as `overloaded` on connect) is returned as an
    /// answer with a nil id.
    ///
    /// - Throws: `KeyholeClientError` (`unavailable`, `connection_lost`, `timeout`, `protocol_error`).
    public func send(_ op: String, args: [String: JSONValue] = [:]) async throws(KeyholeClientError) -> Response {
        var call = Call(op: op, args: args, client: self)
        return try await call.run(from: call.machine.start())
    }

    /// Sends several requests at once, pipelined: written in this order on one connection when it is
    /// open, then each answered, re-sent or failed on its own as `send` would. Every request has the
    /// same deadline, from now.
    public func sendAll(_ requests: [(op: String, args: [String: JSONValue])]) async -> [Result<Response, KeyholeClientError>] {
        var calls = requests.map { Call(op: $0.op, args: $0.args, client: self) }
        var firstActions = calls.indices.map { calls[$0].machine.start() }
        var started: [EventLoopFuture<SendOutcome>?] = Array(repeating: nil, count: calls.count)
        if !calls.isEmpty, case .success(let connection) = await connector.connection(timeout: calls[0].timeLeft) {
            for index in calls.indices {
                firstActions[index] = calls[index].machine.connected(now: calls[index].clock.now)
                guard case .send = firstActions[index] else { continue }
                calls[index].connection = connection
                started[index] = calls[index].start(on: connection)
            }
        }
        return await withTaskGroup(of: (Int, Result<Response, KeyholeClientError>).self) { group in
            for index in calls.indices {
                let action = firstActions[index]
                let first = started[index]
                let call = calls[index]
                group.addTask {
                    var call = call
                    var next = action
                    if let first {
                        let outcome = (try? await first.get()) ?? .notWritten
                        next = call.machine.sent(outcome, now: call.clock.now)
                    }
                    do throws(KeyholeClientError) {
                        return (index, .success(try await call.run(from: next)))
                    } catch {
                        return (index, .failure(error))
                    }
                }
            }
            var results = [Result<Response, KeyholeClientError>](repeating: .failure(.timeout), count: calls.count)
            for await (index, result) in group { results[index] = result }
            return results
        }
    }

    /// Calls `op` and returns its result.
    ///
    /// - Throws: `ProtocolError` for keyholed's error answer, `KeyholeClientError` for the client's.
    public func call(_ op: String, args: [String: JSONValue] = [:]) async throws -> [String: JSONValue] {
        try await send(op, args: args).outcome.get()
    }

    /// The next request id: unique over the client's life, so a re-send gets a new one.
    func makeID() -> Int64 {
        nextID.wrappingAdd(1, ordering: .relaxed).oldValue
    }

    /// Closes the connection. Calls waiting on it end as their connection ending makes them (a
    /// written request: `connection_lost`); later calls fail with `unavailable`.
    public func close() async throws {
        connector.close()
    }
}
