import KeyholeServer
import NIOCore

extension HTTPListener {
    /// Where the listener takes connections.
    public enum Socket: Sendable, Equatable, CustomStringConvertible {
        /// A Unix socket file the listener creates with `mode` (and `group`, when given).
        case path(String, mode: UInt32, group: UInt32?)
        /// A listening Unix socket systemd passed (named `http`).
        case descriptor(CInt)

        /// `unix:/run/keyhole/http.sock`, or `fd:4`.
        public var description: String {
            switch self {
            case .path(let path, _, _): "unix:\(path)"
            case .descriptor(let descriptor): "fd:\(descriptor)"
            }
        }
    }

    /// A TCP address to listen on.
    public struct Address: Sendable, Equatable, CustomStringConvertible {
        /// An IP address, as written.
        public var host: String
        public var port: Int

        /// `host:port`.
        public init(host: String, port: Int) {
            self.host = host
            self.port = port
        }

        /// `127.0.0.1:9180`.
        public var description: String { "\(host):\(port)" }
    }

    /// The listener's settings (HTTP.md, "Configuration"); keyholed reads them from `[http]`.
    public struct Configuration: Sendable, Equatable {
        /// The Unix socket.
        public var socket = Socket.path("/run/keyhole/http.sock", mode: 0o660, group: nil)
        /// A loopback TCP address, or `nil`.
        public var listen: Address?
        /// The groups every peer of `listen` gets: TCP carries no credentials.
        public var listenAllow: AccessPolicy.Groups = AccessPolicy.Groups(.health)
        /// The session cookie's name.
        public var cookieName = "kh_session"
        /// Connections over both listeners; more are answered 503 and closed.
        public var maxConnections = 1024
        /// A connection with no request under way for this long is closed.
        public var idleTimeout = TimeAmount.seconds(60)
        /// A request head must be in whole this long after its first byte, else 408.
        public var headTimeout = TimeAmount.seconds(10)
        /// Connections the kernel queues before they are accepted.
        public var backlog = 1024
        /// Whether Sign in with Apple's pages are served (`/apple/start`, `/apple/callback`, `/logout`).
        public var web = false
        /// Where a failed web sign-in sends the browser (`?keyhole_error=CODE` added): a path.
        public var webErrorPath = "/"

        /// The defaults.
        public init() {}
    }

    /// What `/healthz` says (HTTP.md, "GET /healthz").
    public enum Health: Sendable, Equatable {
        /// Serving, storage available.
        case ok
        /// The last change could not be written.
        case storageFailed
    }
}
