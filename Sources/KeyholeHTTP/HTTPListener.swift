import CoreMetrics
import KeyholeServer
import KeyholeStore
import Logging
import NIOCore
import NIOExtras
import NIOHTTP1
import NIOPosix
import ServiceLifecycle
import Synchronization

/// keyholed's HTTP listener (HTTP.md): forward-auth for reverse proxies at `/authz`, `/healthz` for
/// load balancers, on a Unix socket of its own and optionally a loopback TCP address. A `Service`:
/// on graceful shutdown it stops accepting, answers the requests under way, closes every connection
/// and returns.
public final class HTTPListener: Service, Sendable {
    let shared: Shared
    private let group: any EventLoopGroup
    private let logger: Logger
    private let onListening: @Sendable () -> Void

    /// A listener on `configuration`, looking sessions up in `store`.
    ///
    /// - Parameters:
    ///   - access: who may ask what (the `[[access]]` rules, shared with the main socket); its
    ///     `socketGroup` is filled in from the HTTP socket once it listens.
    ///   - now: the time sessions are judged at, seconds since 1970.
    ///   - health: what `/healthz` says while the listener serves.
    ///   - metrics: the text `/metrics` answers (Prometheus format); `nil`: 404.
    ///   - web: Sign in with Apple's pages, served when `configuration.web` is on (`nil`: 404).
    ///   - onListening: called once every listener accepts connections.
    public init(
        configuration: Configuration, store: Sessions, access: AccessPolicy, now: @escaping @Sendable () -> Int64,
        health: @escaping @Sendable () -> Health, metrics: (@Sendable () -> String)? = nil, web: AppleWebSignIn? = nil,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton, logger: Logger,
        onListening: @escaping @Sendable () -> Void = {}
    ) {
        var access = access
        access.defaultGroups = configuration.web ? AccessPolicy.Groups.proxies.union(AccessPolicy.Groups(.web)) : .proxies
        access.socketGroup = nil
        self.shared = Shared(
            configuration: configuration, store: store, access: access, now: now, health: health, metrics: metrics,
            web: configuration.web ? web : nil)
        self.group = eventLoopGroup
        self.logger = logger
        self.onListening = onListening
    }

    /// A reload's access rules (`nil`: the default), from each connection's next request on.
    public func applyAccess(rules: [AccessPolicy.Rule]?) {
        shared.access.withLock { $0.rules = rules }
    }

    /// Listens and serves until graceful shutdown.
    public func run() async throws {
        let configuration = shared.configuration
        let quiescing = ServerQuiescingHelper(group: group)
        var socketFile: SocketFile?
        var channels: [any Channel] = []
        do {
            switch configuration.socket {
            case .path(let path, let mode, let group):
                var file = SocketFile(path: path)
                if try file.prepare() {
                    logger.notice("http.stale_socket_removed", metadata: ["socket": "\(path)"])
                }
                let descriptor = try file.bind(mode: mode, group: group, backlog: configuration.backlog)
                socketFile = file
                shared.setSocketGroup(file.group)
                channels.append(try await adopt(descriptor, quiescing: quiescing, name: path))
            case .descriptor(let descriptor):
                shared.setSocketGroup(SocketFile.group(ofListening: descriptor))
                channels.append(try await adopt(descriptor, quiescing: quiescing, name: "fd:\(descriptor)"))
            }
            if let address = configuration.listen {
                do {
                    channels.append(try await bootstrap(quiescing: quiescing, tcp: true).bind(host: address.host, port: address.port).get())
                } catch {
                    throw ServerError.bindFailed("\(address)", "\(error)")
                }
            }
        } catch {
            // Said at once: keyholed only reports the failure once every other service has stopped.
            logger.critical("http.listen_failed", metadata: ["error": "\(error)"])
            for channel in channels { try? await channel.close() }
            socketFile?.remove()
            throw error
        }
        logger.info("http.listening", metadata: [
            "socket": "\(configuration.socket)", "listen": "\(configuration.listen.map(\.description) ?? "none")",
        ])
        onListening()
        let drained = group.any().makePromise(of: Void.self)
        try await withGracefulShutdownHandler {
            try await drained.futureResult.get()
        } onGracefulShutdown: { [logger, shared] in
            logger.info("http.draining")
            shared.quiescing.store(true, ordering: .relaxed)
            quiescing.initiateShutdown(promise: drained)
        }
        socketFile?.remove()
        logger.info("http.stopped")
    }

    private func adopt(_ descriptor: CInt, quiescing: ServerQuiescingHelper, name: String) async throws(ServerError) -> any Channel {
        do {
            return try await bootstrap(quiescing: quiescing, tcp: false).withBoundSocket(descriptor).get()
        } catch {
            throw ServerError.bindFailed(name, "\(error)")
        }
    }

    private func bootstrap(quiescing: ServerQuiescingHelper, tcp: Bool) -> ServerBootstrap {
        let shared = self.shared
        let logger = self.logger
        var bootstrap = ServerBootstrap(group: group)
        if tcp {
            // An answer is one write: sent at once, never held back waiting for an acknowledgement.
            bootstrap = bootstrap.childChannelOption(.socketOption(.tcp_nodelay), value: 1)
        }
        return bootstrap
            .serverChannelOption(.backlog, value: Int32(clamping: shared.configuration.backlog))
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(quiescing.makeServerChannelHandler(channel: channel))
                }
            }
            .childChannelOption(.allowRemoteHalfClosure, value: false)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let operations = channel.pipeline.syncOperations
                    guard shared.openConnection() else {
                        try operations.addHandler(HTTPRejectHandler())
                        return
                    }
                    channel.closeFuture.whenComplete { _ in shared.closeConnection() }
                    let configuration = shared.configuration
                    let timer = HTTPHeadTimer(idleTimeout: configuration.idleTimeout, headTimeout: configuration.headTimeout)
                    try operations.addHandler(timer)
                    // The decoder keeps at most a head's bound and a read's worth of bytes it has not
                    // parsed: past that the connection is closed (a client streaming after an upgrade).
                    try operations.addHandler(ByteToMessageHandler(
                        HTTPRequestDecoder(
                            leftOverBytesStrategy: .dropBytes, informationalResponseStrategy: .drop,
                            limitConfiguration: Shared.decoderLimits),
                        maximumBufferSize: Shared.maxBufferedBytes))
                    try operations.addHandler(HTTPConnectionHandler(
                        listener: shared, timer: timer, peer: tcp ? .tcp : .unix(nil), logger: logger))
                }
            }
    }
}

extension HTTPListener {
    /// A lookup whose answer waits for the disk: the read and the sync's outcome meet here, in
    /// whichever order they come (the sync may be done before `observing` has returned the read).
    final class Waiting: Sendable {
        private let answer: @Sendable (ForwardAuth.Found) -> Void
        private let state = Mutex<(read: (session: Session, user: User?)??, durable: Result<Void, StoreError>?)>((nil, nil))

        init(_ answer: @escaping @Sendable (ForwardAuth.Found) -> Void) {
            self.answer = answer
        }

        func read(_ found: (session: Session, user: User?)?) {
            let durable = state.withLock { state -> Result<Void, StoreError>? in
                state.read = .some(found)
                return state.durable
            }
            if let durable { deliver(found, durable) }
        }

        func complete(_ durable: Result<Void, StoreError>) {
            let read = state.withLock { state -> (session: Session, user: User?)?? in
                state.durable = durable
                return state.read
            }
            if let read { deliver(read, durable) }
        }

        private func deliver(_ found: (session: Session, user: User?)?, _ durable: Result<Void, StoreError>) {
            switch (durable, found) {
            case (.failure, _): answer(.unavailable)
            case (.success, let found?): answer(.session(found.session, found.user))
            case (.success, nil): answer(.none)
            }
        }
    }

    /// Where `/authz` finds sessions: the local store, read in place on the event loop, or any
    /// other `SessionStoring` (PostgreSQL), asked from a task.
    public enum Sessions: Sendable {
        case local(Store)
        case shared(any SessionStoring)
    }

    /// What every connection of the listener shares.
    final class Shared: Sendable {
        let configuration: Configuration
        let access: Mutex<AccessPolicy>
        let store: Sessions
        let now: @Sendable () -> Int64
        let health: @Sendable () -> Health
        let metrics: (@Sendable () -> String)?
        /// Sign in with Apple's pages, when on.
        let web: AppleWebSignIn?
        let answers = AuthzAnswers()
        let quiescing = Atomic(false)
        private let connections = Atomic(0)
        private let logRate = Mutex(LogRate())

        /// Bytes the decoder may hold unparsed: a whole head and a read's worth more.
        static let maxBufferedBytes = 80 << 10

        /// Connections closed because their answers were not taken (`keyholed_slow_readers_total`).
        let slowReaders = Counter(label: "keyholed_slow_readers_total")

        /// 16 KiB for the request line and headers together and for any one of them, 100 fields.
        static let decoderLimits: NIOHTTPDecoderLimitConfiguration = {
            var limits = NIOHTTPDecoderLimitConfiguration()
            limits.maxHeaderFieldSize = 16 << 10
            limits.maxHeaderListSize = 16 << 10
            limits.maxHeaderFieldCount = 100
            return limits
        }()

        init(configuration: Configuration, store: Sessions, access: AccessPolicy, now: @escaping @Sendable () -> Int64,
             health: @escaping @Sendable () -> Health, metrics: (@Sendable () -> String)?, web: AppleWebSignIn?) {
            self.configuration = configuration
            self.access = Mutex(access)
            self.store = store
            self.now = now
            self.health = health
            self.metrics = metrics
            self.web = web
        }

        var isQuiescing: Bool { quiescing.load(ordering: .relaxed) }

        func setSocketGroup(_ group: UInt32?) {
            access.withLock { $0.socketGroup = group }
        }

        func openConnection() -> Bool {
            guard connections.wrappingAdd(1, ordering: .relaxed).newValue <= configuration.maxConnections else {
                connections.wrappingSubtract(1, ordering: .relaxed)
                return false
            }
            return true
        }

        func closeConnection() {
            connections.wrappingSubtract(1, ordering: .relaxed)
        }

        /// Looks `token` up as `session.get` does (a use), answering once everything the read could
        /// have seen is on disk: at once, usually; else from the committer's thread.
        func lookUp(_ token: String, answer: @escaping @Sendable (ForwardAuth.Found) -> Void) {
            let time = now()
            let store: Store
            switch self.store {
            case .local(let local):
                store = local
            case .shared(let shared):
                switch shared.sessionWithoutWaiting(token: token, now: time) {
                case .found(let session, let user): return answer(.session(session, user))
                case .notFound: return answer(.none)
                case .mustWait: break
                }
                // The database: read in a task, never on the event loop.
                Task {
                    do {
                        let found = try await shared.session(token: token, now: time)
                        answer(found.map { .session($0.session, $0.user) } ?? .none)
                    } catch {
                        answer(.unavailable)
                    }
                }
                return
            }
            // The usual case, nothing on its way to the disk, answers at once and allocates nothing
            // here; else the answer waits for the sync (on the committer's thread), with what was read.
            var waiting: Waiting?
            let (read, now) = store.observing({ store.session(token: token, now: time) }) {
                let made = Waiting(answer)
                waiting = made
                return { made.complete($0) }
            }
            let found = read.map { (session: $0.session, user: $0.user) }
            switch now {
            case .success?: answer(found.map { .session($0.session, $0.user) } ?? .none)
            case .failure?: answer(.unavailable)
            case nil: waiting?.read(found)
            }
        }

        /// `/metrics`' answer now.
        func metricsAnswer() -> HTTPAnswer {
            guard let metrics else { return HTTPAnswer(.notFound) }
            return HTTPAnswer(.ok, headers: [("Content-Type", "text/plain; version=0.0.4; charset=utf-8")], body: metrics())
        }

        /// `/healthz`'s answer now.
        func healthAnswer() -> HTTPAnswer {
            if isQuiescing { return .json(.serviceUnavailable, #"{"reason":"shutting_down","status":"unavailable"}"#) }
            switch health() {
            case .ok: return .json(.ok, #"{"status":"ok"}"#)
            case .storageFailed: return .json(.serviceUnavailable, #"{"reason":"storage","status":"unavailable"}"#)
            }
        }

        /// A refused request, in the log at warning at most ten times a second.
        func logRefusal(peer: HTTPConnectionHandler.Peer, path: Substring, logger: Logger) {
            let heldBack = logRate.withLock { $0.admit("http.denied", now: .now()) }
            var metadata: Logger.Metadata = ["path": "\(path)"]
            switch peer {
            case .unix(let credentials?): metadata["peer_uid"] = "\(credentials.uid)"
            case .unix(nil): metadata["peer"] = "unknown"
            case .tcp: metadata["peer"] = "tcp"
            }
            guard let heldBack else { return logger.debug("http.denied", metadata: metadata) }
            if heldBack > 0 { metadata["suppressed"] = "\(heldBack)" }
            logger.warning("http.denied", metadata: metadata)
        }
    }
}
