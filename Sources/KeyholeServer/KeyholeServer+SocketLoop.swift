import KeyholeProtocol
import KeyholeSocketLoop
import Logging
import NIOCore
import ServiceLifecycle

#if canImport(Glibc)
import Glibc
#endif

/// Serving on keyholed's own loops (`[server] loop = "epoll"`, REQUEST_LOOP.md).
extension KeyholeServer {
    /// Serves the listening socket on `SocketLoop`s until graceful shutdown (every connection drained),
    /// or at once on cancellation.
    func serveOnSocketLoops(_ descriptor: CInt, name: String) async throws {
        let group: SocketLoopGroup
        do {
            group = try SocketLoopGroup(count: core.configuration.threads)
        } catch {
            throw ServerError.bindFailed(name, "\(error)")
        }
        // For a socket systemd passed: the backlog keyholed is configured with.
        guard listen(descriptor, CInt(clamping: core.configuration.backlog)) == 0 else {
            throw ServerError.bindFailed(name, "listen: \(String(cString: strerror(errno)))")
        }
        let core = self.core
        let logger = self.logger
        group.start(
            listeningOn: descriptor,
            accepted: { connection in Self.accept(connection, group: group, core: core, logger: logger) },
            failed: { code in
                var metadata: Logger.Metadata = ["error": "\(String(cString: strerror(code)))"]
                guard core.admitLog("server.accept_failed", metadata: &metadata) else { return }
                logger.warning("server.accept_failed", metadata: metadata)
            },
            // Closed once no loop watches it: from then on a client connecting to a socket file is
            // refused at once, as with SwiftNIO's listener; with systemd's, it waits in systemd's backlog.
            released: { _ = close(descriptor) }
        )
        setSocketLoops(group)
        logger.info("server.listening", metadata: ["listener": "\(core.configuration.listener)", "loop": "epoll"])
        onListening()

        await withTaskCancellationHandler {
            await withGracefulShutdownHandler {
                await group.finished()
            } onGracefulShutdown: {
                logger.info("server.draining")
                group.quiesce()
            }
        } onCancel: {
            group.stop()
        }
        setSocketLoops(nil)
    }

    /// A connection a loop accepted: served, or answered `overloaded` and closed past `max_connections`.
    private static func accept(_ connection: SocketConnection, group: SocketLoopGroup, core: ServerCore, logger: Logger) {
        let limits = core.limits.current
        guard core.stats.openConnection(limit: limits.maxConnections) else {
            core.metrics.refusedOverMax.increment()
            connection.loop.pauseAccepting()
            RejectHandler.writeRefusal(into: &connection.output, stats: core.stats)
            connection.outputAdded()
            connection.closeAfterWrites()
            return
        }
        core.metrics.accepted.increment()
        let served = LoopConnection(
            connection: connection, loop: connection.loop, group: group, core: core, limits: limits, logger: logger)
        connection.delegate = served
        served.identified(as: core.credentials(ofSocket: connection.fd))
    }
}
