import KeyholeProtocol
import NIOCore

/// One connection to keyholed: a channel with a `ClientHandler`, and what that handler tells about it.
final class Connection: Sendable {
    let channel: any Channel
    let status: ConnectionStatus

    init(channel: any Channel, status: ConnectionStatus) {
        self.channel = channel
        self.status = status
    }

    /// Whether a request may be sent on it now.
    var isUsable: Bool { channel.isActive && status.isUsable }

    /// Sends `op` with `id` and waits for what becomes of it; the wait ends at `deadline` with
    /// `timedOut` (the connection stays open, and a late answer is dropped).
    func send(id: Int64, op: String, args: [String: JSONValue], deadline: ContinuousClock.Instant?) async -> SendOutcome {
        // Never fails: every way it can end is a SendOutcome.
        (try? await start(id: id, op: op, args: args, deadline: deadline).get()) ?? .notWritten
    }

    /// Sends `op` with `id` now (requests started one after another are written in that order) and
    /// returns what will become of it, as `send` does.
    func start(id: Int64, op: String, args: [String: JSONValue], deadline: ContinuousClock.Instant?) -> EventLoopFuture<SendOutcome> {
        let promise = channel.eventLoop.makePromise(of: SendOutcome.self)
        let written = channel.eventLoop.makePromise(of: Void.self)
        // On a closed channel the handler is gone and never sees the request: end it from the write.
        let status = self.status
        written.futureResult.whenFailure { _ in promise.succeed(status.unwrittenOutcome) }
        if let deadline {
            let channel = self.channel
            let timer = channel.eventLoop.scheduleTask(in: TimeAmount(ContinuousClock.now.duration(to: deadline))) {
                channel.triggerUserOutboundEvent(ClientHandler.Forget(id: id), promise: nil)
                promise.succeed(.timedOut)
            }
            promise.futureResult.whenComplete { _ in timer.cancel() }
        }
        channel.writeAndFlush(ClientHandler.Outbound(id: id, op: op, args: args, promise: promise), promise: written)
        return promise.futureResult
    }

    /// Closes the channel; calls waiting on it learn that it ended.
    func close() {
        channel.close(promise: nil)
    }
}
