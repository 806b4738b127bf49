import KeyholeProtocol
import Logging
import NIOCore

/// The limits a connection is held to besides back pressure: its uid's connections and request
/// rate (`PeerLimits`), its unsent output, and how often its events may be logged (`LogRate`).
extension ConnectionHandler {
    /// Counts the connection towards its uid's limit, or refuses it when the uid is at the limit.
    func admit(_ peer: PeerCredentials, context: ChannelHandlerContext) {
        let limit = maxConnectionsPerUID
        if core.peers.withLock({ $0.openConnection(uid: peer.uid, limit: limit) }) {
            countedUID = peer.uid
            return
        }
        core.stats.rejectedConnections.add()
        core.metrics.refusedOverUIDMax.increment()
        noteLimited("connection.refused", ["reason": "max_connections_per_uid", "limit": "\(limit)", "audit": "true"])
        let error = ProtocolError.overloaded(
            "uid \(peer.uid) has \(limit) connections open, its limit ([server] max_connections_per_uid)", retryAfterMs: 1000)
        write(Response(id: nil, outcome: .failure(error)), context: context)
        machine.closed()
        closeAfterWrites(context: context)
    }

    func releaseUID() {
        guard let uid = countedUID else { return }
        countedUID = nil
        core.peers.withLock { $0.closeConnection(uid: uid) }
    }

    /// `overloaded` when the peer's uid is over its request rate, else `nil`.
    func rateRefusal() -> ProtocolError? {
        guard let uid = countedUID else { return nil }
        let (rate, burst) = (requestsPerSecond, requestBurst)
        guard let wait = core.peers.withLock({ $0.takeRequest(uid: uid, now: .now(), rate: rate, burst: burst) }) else {
            return nil
        }
        refusals += 1
        noteLimited("request.rate_limited", ["audit": "true"], atNotice: refusals == 1)
        let milliseconds = Int((wait.nanoseconds + 999_999) / 1_000_000)
        return .overloaded(
            "uid \(uid) is over its request rate ([server] requests_per_second_per_uid)", retryAfterMs: max(1, milliseconds))
    }

    /// Responses not yet on the socket: batched here, and queued in the channel. The channel's
    /// queue is asked for only when it pushes back (not writable), which it does well below the limit.
    func unsentBytes(context: ChannelHandlerContext) -> Int {
        let batched = outboundHandedOver ? 0 : outbound.readableBytes
        let queued = (try? context.channel.syncOptions?.getOption(.bufferedWritableBytes)) ?? 0
        return batched + queued
    }

    /// Logs a connection's `event` at notice within the server's log rate (`LogRate`), else at debug.
    /// `atNotice: false` logs at debug in any case (a repeat on one connection).
    func noteLimited(_ event: String, _ metadata: Logger.Metadata, atNotice: Bool = true) {
        guard logger.logLevel <= .notice else { return }
        var metadata = metadata
        var level = Logger.Level.debug
        if atNotice, let suppressed = core.logRate.withLock({ $0.admit(event, now: .now()) }) {
            level = .notice
            if suppressed > 0 { metadata["suppressed"] = "\(suppressed)" }
        }
        logger.log(level: level, "\(event)", metadata: metadata)
    }

    /// The client does not read what it asked for: close rather than hold more for it.
    func cutSlowReader(context: ChannelHandlerContext) {
        let unsent = unsentBytes(context: context)
        core.stats.slowReaders.add()
        core.metrics.slowReaders.increment()
        noteLimited("connection.slow_reader", ["unsent_bytes": "\(unsent)", "limit": "\(maxUnsentBytes)", "audit": "true"])
        machine.closed()
        closing = true
        context.close(promise: nil)
    }
}
