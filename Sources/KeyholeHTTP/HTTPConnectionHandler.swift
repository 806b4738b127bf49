import KeyholeServer
import KeyholeStore
import Logging
import NIOCore
import NIOHTTP1

/// Serves one HTTP connection, one request at a time (NIO's `HTTPServerPipelineHandler`, before it,
/// holds pipelined requests back until the answer before them is out). Every request is answered on
/// its head: bodies are never read, and a request announcing one closes the connection after its
/// answer (HTTP.md, "Requests").
final class HTTPConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    /// Who is on the other end.
    enum Peer {
        /// A Unix socket peer, with its credentials once the kernel gave them.
        case unix(PeerCredentials?)
        /// A TCP peer: no credentials.
        case tcp
    }

    private let listener: HTTPListener.Shared
    private let timer: HTTPHeadTimer
    private var peer: Peer
    private var logger: Logger
    /// Set between a head and the end of its answer.
    private var request: (version: HTTPVersion, head: Bool, keepAlive: Bool)?

    init(listener: HTTPListener.Shared, timer: HTTPHeadTimer, peer: Peer, logger: Logger) {
        self.listener = listener
        self.timer = timer
        self.peer = peer
        self.logger = logger
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
        guard case .head(let head) = unwrapInboundIn(data) else { return }  // bodies are never read
        timer.headArrived()
        // A body announced is not waited for: answered now, and the connection closed after.
        let announcesBody = head.headers.contains(name: "transfer-encoding")
            || head.headers["content-length"].contains { $0 != "0" }
        let keepAlive = head.isKeepAlive && !announcesBody && !listener.isQuiescing
        request = (head.version, head.method == .HEAD, keepAlive)
        serve(head, context: context)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        // A head the decoder refused: its answer, then the connection closes (the stream is lost).
        let status: HTTPResponseStatus = if let error = error as? HTTPParserError, error == .headerOverflow {
            .requestHeaderFieldsTooLarge
        } else if error is HTTPParserError {
            .badRequest
        } else {
            .internalServerError
        }
        if status == .internalServerError {
            logger.warning("http.connection_error", metadata: ["error": "\(error)"])
        }
        guard request == nil else {
            context.close(promise: nil)
            return
        }
        request = (.http1_1, false, false)
        write(HTTPAnswer(status), context: context)
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
        } else {
            return write(HTTPAnswer(.notFound), context: context)
        }
        guard head.method == .GET || head.method == .HEAD else {
            return write(HTTPAnswer(.methodNotAllowed, headers: ["Allow": "GET, HEAD"]), context: context)
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
                    handler.write(answer, context: context)
                }
                if loop.inEventLoop { deliver() } else { loop.execute(deliver) }
            }
        }
    }

    private func write(_ answer: HTTPAnswer, context: ChannelHandlerContext) {
        guard let request, context.channel.isActive else { return }
        self.request = nil
        let (head, body) = answer.parts(version: request.version, keepAlive: request.keepAlive, allocator: context.channel.allocator)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if !request.head && body.readableBytes > 0 {
            context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
        }
        if request.keepAlive {
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            timer.answered()
        } else {
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { _ in channel.close(promise: nil) }
        }
    }

    /// The path and the query (without `?`) of a request target.
    static func split(_ uri: String) -> (path: Substring, query: Substring?) {
        guard let mark = uri.firstIndex(of: "?") else { return (uri[...], nil) }
        return (uri[..<mark], uri[uri.index(after: mark)...])
    }
}
