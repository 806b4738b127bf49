import KeyholeServer
import KeyholeStore
import Logging
import NIOCore
import NIOHTTP1

/// Serves one HTTP connection, one request at a time, answering each on its head: bodies are never
/// read, and a request announcing one closes the connection after its answer (HTTP.md, "Requests"),
/// but for Apple's form_post to `/apple/callback`, read whole (bounded) and answered after it.
/// A request whose answer waits (for the disk) holds back the heads pipelined after it, and reading
/// stops while more than a few are held; answers go out in order, written as bytes straight to the
/// socket (HTTPAnswer).
final class HTTPConnectionHandler: ChannelDuplexHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// Who is on the other end.
    enum Peer {
        /// A Unix socket peer, with its credentials once the kernel gave them.
        case unix(PeerCredentials?)
        /// A TCP peer: no credentials.
        case tcp
    }

    /// The request being answered.
    private struct Current {
        var version: HTTPVersion
        var head: Bool
        var keepAlive: Bool
    }

    /// Heads held back past this many stop reading until they are answered.
    private static let maxHeld = 16
    /// Answers not yet taken by a client that does not read: past this, the connection is closed.
    static let maxUnsentBytes = 1 << 20

    private let listener: HTTPListener.Shared
    private let timer: HTTPHeadTimer
    private var peer: Peer
    private var logger: Logger
    private var current: Current?
    /// Waiting for an answer that comes later (a lookup waiting for the disk).
    private var waiting = false
    private var held = CircularBuffer<HTTPRequestHead>()
    /// No new request: the connection closes once the one being answered and those held back
    /// are (a request that is the last one, or a quiesce at shutdown). Nothing more is read.
    private var closing = false
    private var readPending = false
    /// The stream was found broken: nothing more is read or answered but the one error answer.
    private var failed = false
    /// `/apple/callback`'s body, while it is read: its head, its bytes so far, and the pages.
    private var collecting: (head: HTTPRequestHead, body: ByteBuffer, web: AppleWebSignIn)?
    private var context: ChannelHandlerContext?

    init(listener: HTTPListener.Shared, timer: HTTPHeadTimer, peer: Peer, logger: Logger) {
        self.listener = listener
        self.timer = timer
        self.peer = peer
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
    }

    func channelActive(context: ChannelHandlerContext) {
        if case .unix = peer {
            // The kernel's answer is at hand, so this completes before the first read is served.
            let bound = NIOLoopBound(self, eventLoop: context.eventLoop)
            PeerCredentials.read(from: context.channel).whenSuccess { credentials in
                bound.value.peer = .unix(credentials)
                if let credentials { bound.value.logger[metadataKey: "peer_uid"] = "\(credentials.uid)" }
            }
        }
        context.fireChannelActive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let part = unwrapInboundIn(data)
        if collecting != nil, !failed {
            collect(part, context: context)
            return
        }
        guard case .head(let head) = part, !closing, !failed else { return }  // other bodies are never read
        if !waiting, held.isEmpty, let web = listener.web, head.method == .POST,
            Self.split(head.uri).path.utf8.elementsEqual("/apple/callback".utf8)
        {
            // The head timer keeps running: head and body must be in within head_timeout.
            beginCallback(head, web: web, context: context)
            return
        }
        timer.headArrived()
        if waiting || !held.isEmpty {
            held.append(head)
        } else {
            start(head, context: context)
        }
    }

    func read(context: ChannelHandlerContext) {
        // Nothing more is read once the connection is ending; and a client that pipelines far
        // ahead, or does not read its answers, waits for them (back pressure).
        if closing || failed { return }
        if held.count >= Self.maxHeld || !context.channel.isWritable {
            readPending = true
        } else {
            context.read()
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { resumeReading(context: context) }
        context.fireChannelWritabilityChanged()
    }

    private func resumeReading(context: ChannelHandlerContext) {
        guard readPending, !closing, !failed, held.count < Self.maxHeld, context.channel.isWritable else { return }
        readPending = false
        context.read()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if event is ChannelShouldQuiesceEvent {
            // Stop after what was read: the request being answered, and those held back.
            if current == nil && held.isEmpty {
                context.close(promise: nil)
            } else {
                closing = true
            }
            return
        }
        context.fireUserInboundEventTriggered(event)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // Once the stream is lost, what follows (the decoder's later errors on the same bytes) is
        // not answered again.
        guard !failed else { return }
        failed = true
        held.removeAll()
        // Only the kind of error is logged: the decoder's errors carry the bytes read, which may
        // hold a session token.
        guard let parserError = error as? HTTPParserError else {
            logger.debug("http.connection_error", metadata: ["error": "\(type(of: error))"])
            context.close(promise: nil)
            return
        }
        // A head the decoder refused (or one past the buffer's bound): its answer, then the close.
        guard current == nil, !waiting else {
            context.close(promise: nil)
            return
        }
        closing = true
        current = Current(version: .http1_1, head: false, keepAlive: false)
        write(HTTPAnswer(parserError == .headerOverflow ? .requestHeaderFieldsTooLarge : .badRequest), context: context)
    }

    private func start(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        // A body announced is not waited for: answered now, and the connection closed after. Nor is
        // an upgrade (or a CONNECT) followed: the decoder stops at it, so nothing after it could be
        // read as a request.
        let announcesBody = head.headers.contains(name: "transfer-encoding")
            || head.headers["content-length"].contains { $0 != "0" }
        let upgrades = head.method == .CONNECT || head.headers.contains(name: "upgrade")
        let last = announcesBody || upgrades || !head.isKeepAlive
        if last {
            closing = true
            held.removeAll()
        }
        // Whether a drain (a quiesce) ends the connection with this answer is decided when it is written.
        current = Current(version: head.version, head: head.method == .HEAD, keepAlive: !last)
        serve(head, context: context)
    }

    private func serve(_ head: HTTPRequestHead, context: ChannelHandlerContext) {
        let (path, query) = Self.split(head.uri)
        let group: AccessPolicy.Group
        // Paths compared by their bytes.
        if path.utf8.elementsEqual("/authz".utf8) {
            group = .authz
        } else if path.utf8.elementsEqual("/healthz".utf8) {
            group = .health
        } else if path.utf8.elementsEqual("/metrics".utf8) {
            group = .metrics
        } else if let web = listener.web, let page = WebPage(path) {
            return serve(page, head: head, path: path, query: query, web: web, context: context)
        } else {
            return write(HTTPAnswer(.notFound), context: context)
        }
        guard head.method == .GET || head.method == .HEAD else {
            return write(HTTPAnswer(.methodNotAllowed, headers: [("Allow", "GET, HEAD")]), context: context)
        }
        guard allowed().contains(AccessPolicy.Groups(group)) else {
            listener.logRefusal(peer: peer, path: path, logger: logger)
            if group == .authz { listener.answers.denied.increment() }
            return write(group == .authz ? .authz(.forbidden) : HTTPAnswer(.forbidden), context: context)
        }
        switch group {
        case .authz: authorize(query: query, headers: head.headers, context: context)
        case .health: write(listener.healthAnswer(), context: context)
        default: write(listener.metricsAnswer(), context: context)
        }
    }

    /// Sign in with Apple's pages (HTTP.md, "Sign in with Apple").
    private enum WebPage {
        case start, callback, logout

        init?(_ path: Substring) {
            if path.utf8.elementsEqual("/apple/start".utf8) {
                self = .start
            } else if path.utf8.elementsEqual("/apple/callback".utf8) {
                self = .callback
            } else if path.utf8.elementsEqual("/logout".utf8) {
                self = .logout
            } else {
                return nil
            }
        }
    }

    private func serve(
        _ page: WebPage, head: HTTPRequestHead, path: Substring, query: Substring?, web: AppleWebSignIn, context: ChannelHandlerContext
    ) {
        // /apple/start makes a pending authorization, so not even HEAD; the others are POSTs.
        let method: HTTPMethod = page == .start ? .GET : .POST
        guard head.method == method else {
            return write(HTTPAnswer(.methodNotAllowed, headers: [("Allow", method == .GET ? "GET" : "POST")]), context: context)
        }
        guard allowed().contains(AccessPolicy.Groups(.web)) else {
            listener.logRefusal(peer: peer, path: path, logger: logger)
            return write(HTTPAnswer(.forbidden), context: context)
        }
        switch page {
        case .start:
            // Answered once the pending sign-in is kept (with PostgreSQL, committed there).
            let query = query.map(String.init)
            let peer = peerUID
            later(context: context) { await WebPages.start(query: query?[...], peer: peer, web: web) }
        case .callback:
            // A callback held behind another request: its body went by unread.
            closing = true
            write(HTTPAnswer(.badRequest), context: context)
        case .logout:
            guard WebPages.sameOrigin(head.headers, origins: web.configuration?.web.returnOrigins ?? []) else {
                return write(HTTPAnswer(.forbidden), context: context)
            }
            let headers = head.headers
            let configuration = listener.configuration
            later(context: context) { await WebPages.logout(headers: headers, web: web, configuration: configuration) }
        }
    }

    /// Apple's form_post: checked on its head, then its body read (`collect`) before it is answered.
    private func beginCallback(_ head: HTTPRequestHead, web: AppleWebSignIn, context: ChannelHandlerContext) {
        current = Current(version: head.version, head: false, keepAlive: false)
        func refuse(_ answer: HTTPAnswer) {
            timer.headArrived()
            closing = true
            held.removeAll()
            write(answer, context: context)
        }
        guard allowed().contains(AccessPolicy.Groups(.web)) else {
            listener.logRefusal(peer: peer, path: "/apple/callback", logger: logger)
            return refuse(HTTPAnswer(.forbidden))
        }
        let types = head.headers[canonicalForm: "content-type"]
        guard types.count == 1, let type = types.first, Self.isFormType(type) else { return refuse(HTTPAnswer(.unsupportedMediaType)) }
        if let length = head.headers.first(name: "content-length"), (Int(length) ?? .max) > WebPages.maximumBody {
            return refuse(HTTPAnswer(.payloadTooLarge))
        }
        collecting = (head, context.channel.allocator.buffer(capacity: 0), web)
    }

    /// A part of `/apple/callback`'s request: its body's bytes, bounded, then its end.
    private func collect(_ part: HTTPServerRequestPart, context: ChannelHandlerContext) {
        guard case (var head, var body, let web)? = collecting else { return }
        switch part {
        case .head:
            return
        case .body(var bytes):
            guard body.readableBytes + bytes.readableBytes <= WebPages.maximumBody else {
                collecting = nil
                timer.headArrived()
                closing = true
                return write(HTTPAnswer(.payloadTooLarge), context: context)
            }
            body.writeBuffer(&bytes)
            collecting = (head, body, web)
        case .end:
            collecting = nil
            timer.headArrived()
            // The connection ends with this answer: nothing pipelined after a POST is served.
            closing = true
            head.headers.remove(name: "authorization")
            let headers = head.headers
            let configuration = listener.configuration
            let now = listener.now()
            let logger = self.logger
            let form = body
            later(context: context) {
                await WebPages.callback(body: form, headers: headers, web: web, configuration: configuration, now: now, logger: logger)
            }
        }
    }

    /// Answers the current request with what `answer` gives, once it has, on this connection's loop.
    private func later(context: ChannelHandlerContext, _ answer: @escaping @Sendable () async -> HTTPAnswer) {
        waiting = true
        let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
        let loop = context.eventLoop
        Task {
            let made = await answer()
            loop.execute {
                let (handler, context) = bound.value
                handler.waiting = false
                handler.write(made, context: context)
                handler.startHeld(context: context)
            }
        }
    }

    /// Whether a Content-Type is `application/x-www-form-urlencoded` (any parameters, any case).
    static func isFormType(_ value: Substring) -> Bool {
        let type = value.utf8.prefix { $0 != UInt8(ascii: ";") }.filter { $0 != UInt8(ascii: " ") && $0 != UInt8(ascii: "\t") }
        return type.map { $0 >= 0x41 && $0 <= 0x5A ? $0 | 0x20 : $0 }.elementsEqual("application/x-www-form-urlencoded".utf8)
    }

    private var peerUID: UInt32? {
        if case .unix(let credentials?) = peer { return credentials.uid }
        return nil
    }

    private func allowed() -> AccessPolicy.Groups {
        switch peer {
        case .unix(let credentials): listener.access.withLock { $0.allowed(for: credentials) }
        case .tcp: listener.configuration.listenAllow
        }
    }

    private func authorize(query: Substring?, headers: HTTPHeaders, context: ChannelHandlerContext) {
        switch ForwardAuth.ask(query: query, headers: headers, cookieName: listener.configuration.cookieName) {
        case .answer(let status):
            let answer = ForwardAuth.answer(status)
            listener.answers.count(answer.status)
            write(answer, context: context)
        case .lookUp(let token, let conditions):
            // Set before asking: the answer may come before lookUp returns (the usual case).
            waiting = true
            let bound = NIOLoopBound((self, context), eventLoop: context.eventLoop)
            let loop = context.eventLoop
            listener.lookUp(token) { found in
                let deliver: @Sendable () -> Void = {
                    let (handler, context) = bound.value
                    let (answer, refusal) = ForwardAuth.answer(found, conditions: conditions)
                    handler.listener.answers.count(answer.status)
                    if let refusal {
                        handler.logger.warning("http.authz_header_too_long", metadata: ["header": "\(refusal)"])
                    }
                    handler.waiting = false
                    handler.write(answer, context: context)
                    handler.startHeld(context: context)
                }
                if loop.inEventLoop { deliver() } else { loop.execute(deliver) }
            }
        }
    }

    /// Serves the heads held back while an answer waited, until one waits again.
    private func startHeld(context: ChannelHandlerContext) {
        // Held heads were read before any close was decided: they are answered (a `last` one has
        // cleared what followed it).
        while !waiting, current == nil, !failed, let head = held.popFirst() {
            start(head, context: context)
        }
        resumeReading(context: context)
    }

    private func write(_ answer: HTTPAnswer, context: ChannelHandlerContext) {
        guard let request = current, context.channel.isActive else { return }
        current = nil
        // Draining (quiesced while this was answered): the last answer closes the connection.
        let keepAlive = request.keepAlive && !(closing && held.isEmpty)
        var buffer = context.channel.allocator.buffer(capacity: 256 + answer.body.utf8.count)
        answer.write(into: &buffer, version: request.version, keepAlive: keepAlive, head: request.head)
        if keepAlive {
            context.writeAndFlush(wrapOutboundOut(buffer), promise: nil)
            timer.answered()
            // A client that sends and never reads: its answers are not kept for it without bound.
            if let unsent = try? context.channel.syncOptions?.getOption(.bufferedWritableBytes), unsent > Self.maxUnsentBytes {
                listener.slowReaders.increment()
                logger.debug("http.slow_reader", metadata: ["unsent_bytes": "\(unsent)"])
                closing = true
                context.close(promise: nil)
            }
        } else {
            closing = true
            timer.closing()
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(buffer)).whenComplete { _ in channel.close(promise: nil) }
        }
    }

    /// The path and the query (without `?`) of a request target.
    static func split(_ uri: String) -> (path: Substring, query: Substring?) {
        // By bytes: `?` is ASCII, and a Character search would read grapheme clusters.
        guard let mark = uri.utf8.firstIndex(of: UInt8(ascii: "?")) else { return (uri[...], nil) }
        return (uri[..<mark], uri[uri.utf8.index(after: mark)...])
    }
}
