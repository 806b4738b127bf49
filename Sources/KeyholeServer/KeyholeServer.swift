import KeyholeProtocol
import KeyholeSocketLoop
import Logging
import NIOCore
import NIOExtras
import NIOPosix
import ServiceLifecycle
import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// keyholed's socket server: protocol v1 on a Unix stream socket, run as a `Service`.
///
/// On graceful shutdown it stops accepting, stops reading, answers every request already read, closes
/// each connection, and returns once all are closed.
public final class KeyholeServer: Service, Sendable {
    let core: ServerCore
    private let group: any EventLoopGroup
    let logger: Logger
    let onListening: @Sendable () -> Void
    /// The loops serving the socket while `run` runs with `loop = .epoll`.
    private let socketLoops = Mutex<SocketLoopGroup?>(nil)

    /// A server with `operations` besides the built-in ones (`ping`, `stats`).
    ///
    /// - Parameters:
    ///   - statistics: members added to the `stats` result.
    ///   - metrics: the Prometheus text `stats` gives with `{"format": "prometheus"}`.
    ///   - onListening: called once the socket accepts connections (readiness notification).
    public init(
        configuration: Configuration,
        operations: [String: Operation] = [:],
        statistics: @escaping @Sendable () -> [String: JSONValue] = { [:] },
        metrics: (@Sendable () -> String)? = nil,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger,
        onListening: @escaping @Sendable () -> Void = {}
    ) {
        self.core = ServerCore(configuration: configuration, operations: operations, statistics: statistics, metrics: metrics)
        self.group = eventLoopGroup
        self.logger = logger
        self.onListening = onListening
    }

    func setSocketLoops(_ group: SocketLoopGroup?) {
        socketLoops.withLock { $0 = group }
    }

    /// Runs `body` on each thread that serves the socket: SwiftNIO's event loops of the group given at
    /// init (with `loop = .nio`), or keyholed's own loops (`.epoll`, once `run` listens). For a
    /// watchdog: a loop that does not run it is stuck.
    public var servingLoops: [@Sendable (@escaping @Sendable () -> Void) -> Void] {
        if core.configuration.loop == .epoll {
            // A loop that ended (drained at shutdown, while others still drain) runs nothing more:
            // it is not asked, so that the watchdog does not take it for stuck.
            let loops = socketLoops.withLock { $0?.loops } ?? []
            return loops.filter { !$0.hasEnded }.map { loop in { loop.execute($0) } }
        }
        return group.makeIterator().map { loop in { loop.execute($0) } }
    }

    /// The server's counters.
    public var stats: ServerStats { core.stats }

    /// Connections open now.
    public var openConnections: Int { core.stats.openConnections.load(ordering: .relaxed) }

    /// A reload's new limits (frame size, connections, in-flight requests, timeouts) for the
    /// connections accepted from now on; open ones keep theirs. Where it listens, the backlog and the
    /// debug operations stay as the server started.
    public func applyLimits(of configuration: Configuration) throws(ServerError) {
        var limits = configuration
        limits.listener = core.configuration.listener
        limits.backlog = core.configuration.backlog
        limits.enableDebugOperations = core.configuration.enableDebugOperations
        try limits.validate()
        core.limits.replace(limits)
    }

    /// A reload's access rules (`nil`: the default), for every connection from its next request on.
    public func applyAccess(rules: [AccessPolicy.Rule]?) {
        core.access.update { $0.rules = rules }
    }

    /// The access policy in force.
    public var accessPolicy: AccessPolicy { core.access.current }

    /// The default policy's clients are the socket file's group: taken from the file once listening.
    private func fillInSocketGroup(_ group: UInt32?) {
        core.access.update { policy in
            if policy.socketGroup == nil { policy.socketGroup = group }
        }
    }

    /// Listens and serves until graceful shutdown.
    public func run() async throws {
        try core.configuration.validate()
        var socketFile: SocketFile?
        let descriptor: CInt
        let name: String
        switch core.configuration.listener {
        case .path(let path, let mode):
            var file = SocketFile(path: path)
            if try file.prepare() {
                logger.notice("server.stale_socket_removed", metadata: ["socket": "\(path)"])
            }
            descriptor = try file.bind(mode: mode, backlog: core.configuration.backlog)
            // Before anything is accepted: a connection accepted first would be judged without the
            // socket's group (with systemd's socket, the very request that started us). From the inode
            // our bind made, read right after it: not from whatever is at the path now.
            fillInSocketGroup(file.group)
            socketFile = file
            name = path
        case .descriptor(let passed):
            fillInSocketGroup(SocketFile.group(ofListening: passed))
            descriptor = passed
            name = "fd:\(passed)"
        }
        do {
            switch core.configuration.loop {
            case .nio: try await serveOnChannels(descriptor, name: name)
            case .epoll: try await serveOnSocketLoops(descriptor, name: name)
            }
        } catch {
            socketFile?.remove()
            throw error
        }
        socketFile?.remove()
        logger.info("server.stopped")
    }

    /// Serves the listening socket on SwiftNIO's channels until graceful shutdown.
    private func serveOnChannels(_ descriptor: CInt, name: String) async throws {
        let quiescing = ServerQuiescingHelper(group: group)
        let channel = try await adopt(descriptor, bootstrap: makeBootstrap(quiescing: quiescing), name: name)
        logger.info("server.listening", metadata: ["listener": "\(core.configuration.listener)", "loop": "nio"])
        onListening()

        let drained = channel.eventLoop.makePromise(of: Void.self)
        try await withGracefulShutdownHandler {
            try await drained.futureResult.get()
        } onGracefulShutdown: { [logger] in
            logger.info("server.draining")
            quiescing.initiateShutdown(promise: drained)
        }
    }

    /// Serves a listening socket: one systemd passed, or one `SocketFile` bound.
    ///
    /// When NIO refuses the descriptor it may or may not have closed it, and it does not say which: it
    /// is left open rather than risk closing a number another thread has since been given. keyholed
    /// exits on this error, so nothing is kept for long.
    private func adopt(_ descriptor: CInt, bootstrap: ServerBootstrap, name: String) async throws(ServerError) -> any Channel {
        let channel: any Channel
        do {
            channel = try await bootstrap.withBoundSocket(descriptor).get()
        } catch {
            throw ServerError.bindFailed(name, "\(error)")
        }
        // NIO called listen(2) again with its own backlog of 128.
        guard listen(descriptor, CInt(clamping: core.configuration.backlog)) == 0 else {
            let reason = String(cString: strerror(errno))
            try? await channel.close()
            throw ServerError.bindFailed(name, "listen: \(reason)")
        }
        return channel
    }

    private func makeBootstrap(quiescing: ServerQuiescingHelper) -> ServerBootstrap {
        let core = self.core
        let logger = self.logger
        return ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: Int32(clamping: core.configuration.backlog))
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(quiescing.makeServerChannelHandler(channel: channel))
                }
            }
            .childChannelOption(.allowRemoteHalfClosure, value: true)
            .childChannelOption(.maxMessagesPerRead, value: 4)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let limits = core.limits.current
                    guard core.stats.openConnection(limit: limits.maxConnections) else {
                        core.metrics.refusedOverMax.increment()
                        try channel.pipeline.syncOperations.addHandler(RejectHandler(stats: core.stats))
                        return
                    }
                    core.metrics.accepted.increment()
                    channel.closeFuture.whenComplete { _ in core.stats.closeConnection() }
                    try channel.pipeline.syncOperations.addHandler(ConnectionHandler(core: core, limits: limits, logger: logger))
                }
            }
    }
}
