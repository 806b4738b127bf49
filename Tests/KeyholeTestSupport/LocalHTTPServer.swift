import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix

/// A real HTTP/1.1 server on 127.0.0.1, for tests of code that fetches: it answers with a scripted
/// response and records every request it gets.
package final class LocalHTTPServer: Sendable {
    /// What the server answers.
    package struct Reply: Sendable {
        package var status: HTTPResponseStatus = .ok
        package var headers: [(String, String)] = [("Content-Type", "application/json")]
        package var body: [UInt8] = []
        /// Never answer (to test timeouts).
        package var hang = false

        package init(status: HTTPResponseStatus = .ok, headers: [(String, String)] = [("Content-Type", "application/json")], body: [UInt8] = [], hang: Bool = false) {
            self.status = status
            self.headers = headers
            self.body = body
            self.hang = hang
        }
    }

    /// A request as received.
    package struct Received: Sendable {
        package var method: HTTPMethod
        package var uri: String
        package var headers: HTTPHeaders
    }

    private let channel: any Channel
    private let state: NIOLockedValueBox<(reply: Reply, received: [Received])>

    /// The port it listens on.
    package var port: Int { channel.localAddress!.port! }
    /// Its base URL, `http://127.0.0.1:PORT`.
    package var url: String { "http://127.0.0.1:\(port)" }

    package init(reply: Reply = Reply()) async throws {
        let state = NIOLockedValueBox((reply: reply, received: [Received]()))
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
    }

    /// Changes what later requests get.
    package func setReply(_ reply: Reply) { state.withLockedValue { $0.reply = reply } }

    /// Every request so far.
    package var received: [Received] { state.withLockedValue { $0.received } }

    package func close() async throws { try await channel.close() }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = HTTPServerRequestPart
        typealias OutboundOut = HTTPServerResponsePart

        let state: NIOLockedValueBox<(reply: Reply, received: [Received])>

        init(state: NIOLockedValueBox<(reply: Reply, received: [Received])>) { self.state = state }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            switch unwrapInboundIn(data) {
            case .head(let head):
                state.withLockedValue { $0.received.append(Received(method: head.method, uri: head.uri, headers: head.headers)) }
            case .body:
                break
            case .end:
                let reply = state.withLockedValue { $0.reply }
                guard !reply.hang else { return }
                var headers = HTTPHeaders(reply.headers)
                headers.replaceOrAdd(name: "Content-Length", value: String(reply.body.count))
                context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: reply.status, headers: headers))), promise: nil)
                context.write(wrapOutboundOut(.body(.byteBuffer(ByteBuffer(bytes: reply.body)))), promise: nil)
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            }
        }
    }
}
