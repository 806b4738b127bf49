/// Every operation of PROTOCOL.md section 7 as this client knows it, from Protocol/ops.json.
///
/// `safeToRepeat` is what the client goes by when a connection ends with a request written but
/// unanswered (PROTOCOL.md section 8): an operation marked safe is sent once more on a new
/// connection, any other fails with `connection_lost`. An operation missing here (a newer keyholed's)
/// is not safe to repeat. KeyholeClientTests checks this table against Protocol/ops.json.
public enum KeyholeOperations {
    /// One operation: its name on the wire, whether it is safe to send again, whether it is a debug one.
    public struct Operation: Sendable, Hashable {
        /// The name on the wire, such as `session.get`.
        public let name: String
        /// Whether sending it twice leaves the same state as sending it once.
        public let safeToRepeat: Bool
        /// Offered only by a keyholed started with `--enable-debug-ops`.
        public let debug: Bool
    }

    /// The operations, in the order of PROTOCOL.md section 7.
    public static let all: [Operation] = [
        Operation(name: "ping", safeToRepeat: true, debug: false),
        Operation(name: "stats", safeToRepeat: true, debug: false),
        Operation(name: "token.verify", safeToRepeat: true, debug: false),
        Operation(name: "jwks.status", safeToRepeat: true, debug: false),
        Operation(name: "jwks.refresh", safeToRepeat: false, debug: false),
        Operation(name: "session.create", safeToRepeat: false, debug: false),
        Operation(name: "session.get", safeToRepeat: true, debug: false),
        Operation(name: "session.revoke", safeToRepeat: true, debug: false),
        Operation(name: "session.revoke_all", safeToRepeat: false, debug: false),
        Operation(name: "session.list", safeToRepeat: true, debug: false),
        Operation(name: "user.get", safeToRepeat: true, debug: false),
        Operation(name: "user.update", safeToRepeat: false, debug: false),
        Operation(name: "user.delete", safeToRepeat: false, debug: false),
        Operation(name: "apple.sign_in", safeToRepeat: false, debug: false),
        Operation(name: "apple.notification", safeToRepeat: false, debug: false),
        Operation(name: "apple.refresh_check", safeToRepeat: false, debug: false),
        Operation(name: "apple.transfer.export", safeToRepeat: false, debug: false),
        Operation(name: "apple.transfer.import", safeToRepeat: false, debug: false),
        Operation(name: "apple.pending", safeToRepeat: true, debug: false),
        Operation(name: "apple.authorize", safeToRepeat: false, debug: false),
        Operation(name: "apple.callback", safeToRepeat: false, debug: false),
        Operation(name: "admin.snapshot", safeToRepeat: false, debug: false),
        Operation(name: "admin.reload", safeToRepeat: false, debug: false),
        Operation(name: "debug.sleep", safeToRepeat: true, debug: true),
        Operation(name: "debug.echo", safeToRepeat: true, debug: true),
        Operation(name: "debug.block", safeToRepeat: false, debug: true),
        Operation(name: "debug.advance_clock", safeToRepeat: false, debug: true),
    ]

    private static let safe: Set<String> = Set(all.filter(\.safeToRepeat).map(\.name))

    /// Whether `op` may be sent again after its connection ended before its answer; `false` for an
    /// operation this client does not know.
    public static func isSafeToRepeat(_ op: String) -> Bool {
        safe.contains(op)
    }
}
