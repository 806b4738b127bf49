import KeyholeProtocol
import NIOCore
import NIOPosix

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension KeyholeClient {
    /// How a client behaves; every member has the default PROTOCOL.md section 8 asks for.
    public struct Configuration: Sendable {
        /// Each call's deadline, covering connecting, waiting to reconnect, writing and the answer
        /// (`nil`: none). Default 5 s.
        public var deadline: Duration? = .seconds(5)
        /// After `overloaded` with `retry_after_ms`, wait that long and send again, if that is before
        /// the deadline. Off by default: the error reaches the caller.
        public var waitOutOverloaded = false
        /// The event loops the connection runs on.
        public var eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton

        /// The defaults.
        public init() {}

        /// `deadline` and `waitOutOverloaded` as given, the rest the defaults.
        public init(deadline: Duration?, waitOutOverloaded: Bool = false) {
            self.deadline = deadline
            self.waitOutOverloaded = waitOutOverloaded
        }

        /// `$KEYHOLE_SOCKET` when set and not empty, else `/run/keyhole/keyhole.sock`.
        public static func defaultSocketPath() -> String {
            socketPath(given: nil, environment: getenv("KEYHOLE_SOCKET").map { String(cString: $0) })
        }

        /// The socket a client talks to: `given`, else `environment` (`$KEYHOLE_SOCKET`) when not
        /// empty, else `/run/keyhole/keyhole.sock`.
        static func socketPath(given: String?, environment: String?) -> String {
            if let given { return given }
            if let environment, !environment.isEmpty { return environment }
            return KeyholeVersion.defaultSocketPath
        }

        var machine: CallStateMachine.Configuration {
            CallStateMachine.Configuration(waitOutOverloaded: waitOutOverloaded)
        }
    }
}
