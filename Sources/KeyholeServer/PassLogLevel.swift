import Logging
import NIOCore

/// Whether the requests one `SocketLoop` serves in a pass log their debug lines, judged once per pass
/// for all its connections.
///
/// Asking a `Logger` its level costs a request about 2 % of its CPU (swift-log reads the handler's
/// level through the handler's existential, retaining what it holds; keyholed's handlers then read
/// the reloadable level): measured side by side, a build without the per-request line took 2-4 % less
/// CPU per ping and session.get. Every connection of a loop logs through the server's handler with
/// metadata of its own, so they share one level; a reload's new level applies from the next pass.
///
/// Confined to its loop's thread.
final class PassLogLevel: @unchecked Sendable {
    /// The pass the answer is for (`SocketLoop.passTime`).
    private var pass = NIODeadline.uptimeNanoseconds(0)
    private var debug = false

    /// Whether `logger` logs at debug, read at most once in the pass that began at `passTime`.
    func logsDebug(_ logger: borrowing Logger, pass passTime: NIODeadline) -> Bool {
        if passTime != pass {
            pass = passTime
            debug = logger.logLevel <= .debug
        }
        return debug
    }
}
