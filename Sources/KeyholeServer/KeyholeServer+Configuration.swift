import KeyholeProtocol
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension KeyholeServer {
    /// Where the server listens.
    public enum Listener: Sendable, Equatable, CustomStringConvertible {
        /// A Unix socket file the server creates with `mode`, replacing a stale one.
        case path(String, mode: UInt32)
        /// A socket that is already bound and listening, handed over as a file descriptor (systemd).
        case descriptor(CInt)

        /// `unix:/run/keyhole/keyhole.sock mode=0660`, or `fd:3`.
        public var description: String {
            switch self {
            case .path(let path, let mode): "unix:\(path) mode=0\(String(mode, radix: 8))"
            case .descriptor(let descriptor): "fd:\(descriptor)"
            }
        }
    }

    /// The event loop that serves the socket (REQUEST_LOOP.md).
    public enum Loop: String, Sendable, CaseIterable {
        /// SwiftNIO's channel pipeline, on SwiftNIO's event loops.
        case nio
        /// keyholed's own epoll loop (`KeyholeSocketLoop`): no channel pipeline on the request path.
        case epoll
    }

    /// The server's settings, with the defaults of PROTOCOL.md and the configuration reference.
    public struct Configuration: Sendable {
        /// Where to listen.
        public var listener = Listener.path(KeyholeVersion.defaultSocketPath, mode: 0o660)
        /// The largest request frame body, 1 byte to 16 MiB.
        public var maxFrameBytes = 65_536
        /// Connections the kernel queues before keyholed accepts them (listen(2)'s backlog, capped by
        /// net.core.somaxconn): clients that connect while keyholed starts or restarts wait there.
        /// Applied to a socket systemd passes too (NIO listens again on it with 128).
        public var backlog = 1024
        /// Connections beyond this many are answered `overloaded` and closed.
        public var maxConnections = 1024
        /// A connection with nothing in flight and no bytes for this long is closed.
        public var idleTimeout = TimeAmount.minutes(5)
        /// A connection that leaves a frame incomplete for this long is closed.
        public var frameTimeout = TimeAmount.seconds(10)
        /// Requests served at once on one connection before the server stops reading from it.
        public var maxInFlight = 128
        /// A connection whose responses waiting to be sent pass this many bytes is closed: a client
        /// that does not read what it asked for must not make keyholed hold ever more for it. At least
        /// 64 KiB (where the channel starts pushing back); a single response may take it past this.
        public var maxUnsentBytes = 1 << 20
        /// Connections one uid may have open at once (over all event loops); more are answered
        /// `overloaded` and closed, so that one runaway client cannot take every connection.
        public var maxConnectionsPerUID = 256
        /// Requests per second one uid may make over all its connections, as a token bucket; `0`: no
        /// limit. A request over it is answered `overloaded` with the wait in `retry_after_ms`.
        public var requestsPerSecondPerUID = 0.0
        /// How many requests a uid that was quiet may make at once (the bucket's size); `nil`: one
        /// second's worth.
        public var requestBurstPerUID: Double?
        /// New connections per second one uid may open, as a token bucket; `0`: no limit. One over it is
        /// answered `overloaded` with the wait in `retry_after_ms`, and closed.
        public var connectionsPerSecondPerUID = 0.0
        /// How many connections a uid that was quiet may open at once; `nil`: one second's worth.
        public var connectionBurstPerUID: Double?
        /// How long a connection that committed a frame error still counts towards its uid's
        /// `maxConnectionsPerUID` after it closed (`.zero`: not at all), so that churning through bad
        /// connections runs into that limit and is refused at connect.
        public var frameErrorHold = TimeAmount.seconds(1)
        /// How long a connection that stopped reading (shutdown, frame error, frame timeout) may take to
        /// answer what it read before it is closed regardless.
        public var drainTimeout = TimeAmount.seconds(30)
        /// At shutdown, how long a connection that has not sent a request yet may take to send its first
        /// one, which is then answered. A client that connected just before the listener closed is
        /// writing its request; closing without reading would fail it. Short: while the old process
        /// waits, new connections wait in the backlog for the next one.
        public var firstRequestGrace = TimeAmount.seconds(1)
        /// Offer the `debug.*` operations (tests and development only).
        public var enableDebugOperations = false
        /// The clock a test moves with `debug.advance_clock` (offered only with the debug operations);
        /// `nil` for a real one.
        public var testClock: TestClock?
        /// Who may ask what. Its `socketGroup` is filled in from the socket file once the server
        /// listens, unless set here.
        public var access = AccessPolicy(serverUser: UInt32(geteuid()))
        /// Where connections' peer credentials come from, called once per connection accepted; `nil`
        /// for the kernel's (SO_PEERCRED). Tests put their own here.
        public var credentialSource: (@Sendable () -> PeerCredentials?)?
        /// Which event loop serves the socket: keyholed's own (`.epoll`, the default) or SwiftNIO's
        /// channels (`.nio`, kept for one release as the fallback).
        public var loop = Loop.epoll
        /// How many threads `.epoll` runs (`.nio` runs on the event-loop group it is given).
        public var threads = max(1, System.coreCount / 2)

        /// The defaults.
        public init() {}

        /// The per-uid rates, with the buckets' sizes defaulted.
        var peerRates: PeerLimits.Rates {
            PeerLimits.Rates(
                requests: requestsPerSecondPerUID, requestBurst: requestBurstPerUID ?? max(1, requestsPerSecondPerUID),
                connections: connectionsPerSecondPerUID, connectionBurst: connectionBurstPerUID ?? max(1, connectionsPerSecondPerUID))
        }

        /// Refuses settings the server cannot run with.
        public func validate() throws(ServerError) {
            guard (256...FrameDecoder.limit).contains(maxFrameBytes) else {
                throw .invalidConfiguration("maxFrameBytes must be from 256 to \(FrameDecoder.limit)")
            }
            guard maxConnections >= 1, maxInFlight >= 1, backlog >= 1 else {
                throw .invalidConfiguration("maxConnections, maxInFlight and backlog must be at least 1")
            }
            guard maxUnsentBytes >= 65_536 else {
                throw .invalidConfiguration("maxUnsentBytes must be at least 65536")
            }
            guard threads >= 1 else {
                throw .invalidConfiguration("threads must be at least 1")
            }
            guard maxConnectionsPerUID >= 1 else {
                throw .invalidConfiguration("maxConnectionsPerUID must be at least 1")
            }
            guard requestsPerSecondPerUID >= 0, requestsPerSecondPerUID.isFinite, (requestBurstPerUID ?? 1) >= 1 else {
                throw .invalidConfiguration("requestsPerSecondPerUID must be 0 or more and requestBurstPerUID at least 1")
            }
            guard connectionsPerSecondPerUID >= 0, connectionsPerSecondPerUID.isFinite, (connectionBurstPerUID ?? 1) >= 1 else {
                throw .invalidConfiguration("connectionsPerSecondPerUID must be 0 or more and connectionBurstPerUID at least 1")
            }
            guard frameErrorHold >= .zero else {
                throw .invalidConfiguration("frameErrorHold must not be negative")
            }
            guard idleTimeout > .zero, frameTimeout > .zero, drainTimeout > .zero, firstRequestGrace > .zero else {
                throw .invalidConfiguration("timeouts must be positive")
            }
        }
    }
}
