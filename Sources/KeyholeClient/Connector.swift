import NIOCore
import NIOPosix
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Keeps the client's one connection: hands out the open one while it is usable (or once more, when
/// keyholed refused it before any call waited on it), and opens a new one on the next need after it
/// ended. Calls that need a connection while one is being opened wait
/// for that one instead of opening their own.
final class Connector: Sendable {
    private enum State {
        case idle
        case connecting(EventLoopFuture<Connection>)
        case open(Connection)
        case closed
    }

    /// Why there is no connection: a connection attempt failed, or the client was closed.
    enum Failure: Error, Equatable {
        case cannotConnect(String)
        case closed
    }

    let socketPath: String
    private let group: any EventLoopGroup
    private let state = Mutex(State.idle)

    init(socketPath: String, group: any EventLoopGroup) {
        self.socketPath = socketPath
        self.group = group
    }

    /// The open connection, or a new one (one attempt, given up after `timeout`).
    func connection(timeout: Duration?) async -> Result<Connection, Failure> {
        enum Step {
            case use(Connection)
            case wait(EventLoopFuture<Connection>)
            case open(EventLoopPromise<Connection>)
            case closed
        }
        let step: Step = state.withLock { state in
            switch state {
            case .open(let connection) where connection.isUsable:
                return .use(connection)
            case .open(let connection) where connection.status.takeUntoldRefusal() != nil:
                // Refused before any call waited on it: the next call goes there, and fails with
                // the refusal (rule 4) instead of reconnecting to be refused again.
                return .use(connection)
            case .connecting(let future):
                return .wait(future)
            case .closed:
                return .closed
            case .idle, .open:
                let promise = group.next().makePromise(of: Connection.self)
                state = .connecting(promise.futureResult)
                return .open(promise)
            }
        }
        let future: EventLoopFuture<Connection>
        switch step {
        case .use(let connection):
            return .success(connection)
        case .closed:
            return .failure(.closed)
        case .wait(let pending):
            future = pending
        case .open(let promise):
            future = promise.futureResult
            open(promise, timeout: timeout)
        }
        do {
            return .success(try await future.get())
        } catch let failure as Failure {
            return .failure(failure)
        } catch {
            return .failure(.cannotConnect("cannot connect to \(socketPath): \(error)"))
        }
    }

    /// The connection kept now, usable or not (for tests: unlike `connection`, it changes nothing).
    var current: Connection? {
        state.withLock { state in
            if case .open(let connection) = state { return connection }
            return nil
        }
    }

    /// Closes the connection, and refuses to open another.
    func close() {
        let previous = state.withLock { state in
            defer { state = .closed }
            return state
        }
        // A connection being opened is closed as it completes (see `open`).
        if case .open(let connection) = previous { connection.close() }
    }

    private func open(_ promise: EventLoopPromise<Connection>, timeout: Duration?) {
        let status = ConnectionStatus()
        var bootstrap = ClientBootstrap(group: promise.futureResult.eventLoop)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ClientHandler(status: status))
                }
            }
        if let timeout {
            bootstrap = bootstrap.connectTimeout(max(.milliseconds(1), TimeAmount(timeout)))
        }
        let path = socketPath
        let attempt = bootstrap.connect(unixDomainSocketPath: path)
            .map { Connection(channel: $0, status: status) }
            .flatMapErrorThrowing { error -> Connection in
                if let error = error as? IOError {
                    throw Failure.cannotConnect("cannot connect to \(path): \(String(cString: strerror(error.errnoCode)))")
                }
                throw Failure.cannotConnect("cannot connect to \(path): \(error)")
            }
        attempt.whenComplete { result in
            let surplus: Connection? = self.state.withLock { state in
                guard case .connecting(let future) = state, future === promise.futureResult else {
                    // The client was closed meanwhile: this connection is nobody's.
                    if case .success(let connection) = result { return connection }
                    return nil
                }
                switch result {
                case .success(let connection): state = .open(connection)
                case .failure: state = .idle
                }
                return nil
            }
            surplus?.close()
        }
        attempt.cascade(to: promise)
    }
}
