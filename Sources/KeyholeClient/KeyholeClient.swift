import KeyholeProtocol
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// An async client for keyholed: many requests in flight on one connection, matched by id.
///
/// ```swift
/// let client = try await KeyholeClient.connect(socketPath: "/run/keyhole/keyhole.sock")
/// let pong = try await client.ping()
/// try await client.close()
/// ```
///
/// Calls throw `ProtocolError` for an error response (carrying its stable code) and
/// `KeyholeClientError` when keyholed cannot be reached or the connection drops.
public final class KeyholeClient: Sendable {
    private let channel: any Channel
    private let closeReason: CloseReason
    private let requestTimeout: TimeAmount?

    private init(channel: any Channel, closeReason: CloseReason, requestTimeout: TimeAmount?) {
        self.channel = channel
        self.closeReason = closeReason
        self.requestTimeout = requestTimeout
    }

    /// Connects to keyholed's socket.
    ///
    /// - Parameter requestTimeout: how long a request may wait for its response before it fails with
    ///   `KeyholeClientError.timeout` (`nil`: no limit). The connection stays usable; a late answer is dropped.
    public static func connect(
        socketPath: String,
        requestTimeout: TimeAmount? = .seconds(30),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws(KeyholeClientError) -> KeyholeClient {
        let closeReason = CloseReason()
        let bootstrap = ClientBootstrap(group: eventLoopGroup)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(ClientHandler(closeReason: closeReason))
                }
            }
        do {
            let channel = try await bootstrap.connect(unixDomainSocketPath: socketPath).get()
            return KeyholeClient(channel: channel, closeReason: closeReason, requestTimeout: requestTimeout)
        } catch let error as IOError {
            throw .cannotConnect(socketPath, String(cString: strerror(error.errnoCode)))
        } catch {
            throw .cannotConnect(socketPath, "\(error)")
        }
    }

    /// Sends a request and returns its response, whether it is a result or an error.
    public func send(_ op: String, args: [String: JSONValue] = [:]) async throws(KeyholeClientError) -> Response {
        let promise = channel.eventLoop.makePromise(of: Response.self)
        let written = channel.eventLoop.makePromise(of: Void.self)
        // On a closed channel the handler is gone and never sees the request: fail it from the write.
        let closeReason = self.closeReason
        written.futureResult.whenFailure { _ in promise.fail(closeReason.clientError) }
        if let requestTimeout {
            let timer = channel.eventLoop.scheduleTask(in: requestTimeout) { promise.fail(KeyholeClientError.timeout) }
            promise.futureResult.whenComplete { _ in timer.cancel() }
        }
        channel.writeAndFlush(ClientHandler.Outbound(op: op, args: args, promise: promise), promise: written)
        do {
            return try await promise.futureResult.get()
        } catch let error as KeyholeClientError {
            throw error
        } catch let error as ProtocolError {
            // A connection-level error response (such as overloaded) ended the connection.
            throw .connectionClosed(because: error)
        } catch {
            throw closeReason.clientError
        }
    }

    /// Calls `op` and returns its result; an error response is thrown as `ProtocolError`.
    public func call(_ op: String, args: [String: JSONValue] = [:]) async throws -> [String: JSONValue] {
        let response: Response
        do {
            response = try await send(op, args: args)
        } catch {
            if let reason = error.reason { throw reason }
            throw error
        }
        return try response.outcome.get()
    }

    /// The server's `ping`.
    public func ping() async throws -> PingResult {
        let result = try await call("ping")
        guard let protocolVersion = result["protocol"]?.intValue, let version = result["version"]?.stringValue,
            let uptime = result["uptime_ms"]?.intValue
        else { throw KeyholeClientError.invalidResponse("ping result lacks protocol, version or uptime_ms") }
        return PingResult(protocolVersion: Int(protocolVersion), version: version, uptimeMs: uptime)
    }

    /// The server's `stats`.
    public func stats() async throws -> [String: JSONValue] {
        try await call("stats")
    }

    /// Closes the connection; requests still waiting fail with `connectionClosed`.
    public func close() async throws {
        do {
            try await channel.close()
        } catch ChannelError.alreadyClosed {
            return
        }
    }
}

/// The result of `ping`.
public struct PingResult: Sendable, Hashable {
    /// The protocol version the server speaks.
    public var protocolVersion: Int
    /// keyholed's version.
    public var version: String
    /// Milliseconds since keyholed started.
    public var uptimeMs: Int64
}
