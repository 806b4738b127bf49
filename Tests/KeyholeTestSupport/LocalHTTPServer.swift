import Dispatch
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// A real HTTP/1.1 server on 127.0.0.1, for tests of code that fetches: it answers with a scripted
/// response (per path, or one for every path) and records every request it gets. Replies can be held
/// back and released, so a test controls exactly when a fetch ends.
package final class LocalHTTPServer: Sendable {
    /// What the server answers.
    package struct Reply: Sendable {
        package var status: HTTPResponseStatus = .ok
        package var headers: [(String, String)] = [("Content-Type", "application/json")]
        package var body: [UInt8] = []
        /// Never answer (to test timeouts).
        package var hang = false
        /// Send the head at once, then the body one byte per this interval (a server trickling).
        package var trickle: TimeAmount?

        package init(status: HTTPResponseStatus = .ok, headers: [(String, String)] = [("Content-Type", "application/json")], body: [UInt8] = [], hang: Bool = false, trickle: TimeAmount? = nil) {
            self.status = status
            self.headers = headers
            self.body = body
            self.hang = hang
            self.trickle = trickle
        }
    }

    /// A request as received.
    package struct Received: Sendable {
        package var method: HTTPMethod
        package var uri: String
        package var headers: HTTPHeaders
        /// The request body (at most 1 MiB is kept).
        package var body: [UInt8] = []
    }

    /// Makes the reply to a request from the request itself (a fake service with state).
    package typealias Responder = @Sendable (Received) -> Reply

    struct State {
        var reply: Reply
        var paths: [String: Reply] = [:]
        var responders: [String: Responder] = [:]
        var received: [Received] = []
        var holding = false
        var held: [@Sendable () -> Void] = []
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }

    private let channel: any Channel
    private let state: NIOLockedValueBox<State>

    /// The port it listens on (or listened on, once closed).
    package let port: Int
    /// Its base URL, `http://127.0.0.1:PORT`.
    package var url: String { "http://127.0.0.1:\(port)" }

    package init(reply: Reply = Reply()) async throws {
        let state = NIOLockedValueBox(State(reply: reply))
        self.state = state
        channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(Handler(state: state))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        port = channel.localAddress!.port!
    }

    /// Changes what later requests get.
    package func setReply(_ reply: Reply) { state.withLockedValue { $0.reply = reply } }

    /// Changes what later requests for `path` get (other paths get the general reply).
    package func setReply(_ reply: Reply, forPath path: String) { state.withLockedValue { $0.paths[path] = reply } }

    /// Requests for `path` are answered by `responder`, called once the whole request is in.
    package func setResponder(forPath path: String, _ responder: @escaping Responder) {
        state.withLockedValue { $0.responders[path] = responder }
    }

    /// Every request so far.
    package var received: [Received] { state.withLockedValue { $0.received } }

    /// From now on, replies wait until `release()`.
    package func hold() { state.withLockedValue { $0.holding = true } }

    /// Sends every held reply, and stops holding.
    package func release() {
        let held = state.withLockedValue { state in
            state.holding = false
            defer { state.held = [] }
            return state.held
        }
        for send in held { send() }
    }

    /// Returns once the server has received at least `count` requests in all.
    package func waitForRequests(_ count: Int) async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let done = state.withLockedValue { state in
                if state.received.count >= count { return true }
                state.waiters.append((count, continuation))
                return false
            }
            if done { continuation.resume() }
        }
    }

    package func close() async throws { try await channel.close() }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        let state: NIOLockedValueBox<State>
        /// The path of the request being read on this connection.
        var path = "/"
        /// The request being read on this connection.
        var request: Received?

        init(state: NIOLockedValueBox<State>) { self.state = state }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch Self.unwrapInboundIn(data) {
            case .head(let head):
                path = String(head.uri.prefix { $0 != "?" })
                request = Received(method: head.method, uri: head.uri, headers: head.headers)
                let ready = state.withLockedValue { state in
                    state.received.append(Received(method: head.method, uri: head.uri, headers: head.headers))
                    let count = state.received.count
                    var ready: [CheckedContinuation<Void, Never>] = []
                    state.waiters.removeAll { waiter in
                        guard waiter.count <= count else { return false }
                        ready.append(waiter.continuation)
                        return true
                    }
                    return ready
                }
                for continuation in ready { continuation.resume() }
            case .body(let bytes):
                if let count = request?.body.count, count + bytes.readableBytes <= 1 << 20 {
                    request?.body += bytes.readableBytesView
                }
            case .end:
                let path = self.path
                let request = self.request
                let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
                let eventLoop = context.eventLoop
                let send: @Sendable () -> Void = { [state] in
                    let (reply, responder) = state.withLockedValue { ($0.paths[path] ?? $0.reply, $0.responders[path]) }
                    guard let responder, let request else {
                        eventLoop.execute { Self.write(reply, context: loopBound.value) }
                        return
                    }
                    // A responder may take its time (the fake Apple runs openssl for each client secret
                    // and token): it runs off the event loop, which every server and client of the test
                    // process shares, and only the writing comes back to it.
                    DispatchQueue.global().async {
                        let answer = responder(request)
                        eventLoop.execute { Self.write(answer, context: loopBound.value) }
                    }
                }
                let holding = state.withLockedValue { state in
                    if state.holding { state.held.append(send) }
                    return state.holding
                }
                if !holding { send() }
            }
        }

        private static func write(_ reply: Reply, context: ChannelHandlerContext) {
            guard !reply.hang else { return }
            var headers = HTTPHeaders(reply.headers)
            headers.replaceOrAdd(name: "Content-Length", value: String(reply.body.count))
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: reply.status, headers: headers))), promise: nil)
            if let interval = reply.trickle {
                context.flush()
                let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
                let body = reply.body
                let sent = NIOLoopBoundBox(0, eventLoop: context.eventLoop)
                context.eventLoop.scheduleRepeatedTask(initialDelay: interval, delay: interval) { task in
                    let context = loopBound.value
                    guard sent.value < body.count, context.channel.isActive else {
                        if context.channel.isActive { context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil) }
                        task.cancel()
                        return
                    }
                    context.writeAndFlush(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: [body[sent.value]])))), promise: nil)
                    sent.value += 1
                }
                return
            }
            context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: reply.body)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}

/// An event loop for tests that call an operation directly and need one to hand it (NIO's shared
/// group, so that test targets need not depend on NIOPosix themselves).
package func testEventLoop() -> any EventLoop {
    MultiThreadedEventLoopGroup.singleton.next()
}
