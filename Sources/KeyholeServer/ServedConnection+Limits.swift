import KeyholeProtocol
import Logging
import NIOCore

/// The limits a connection is held to besides back pressure: its uid's connections and request
/// rate (`PeerLimits`), its unsent output, and how often its events may be logged (`LogRate`).
extension ServedConnection {
    /// Counts the connection towards its uid's limit, or refuses it when the uid is at the limit.
    ///
    /// At the limit, the loop may look again once every hang-up already signalled has been read
    /// (`deferAdmission`): a client that closed a connection and at once opened another must not be
    /// refused for the one it no longer has, which the loops may not have read yet.
    func admit(_ peer: PeerCredentials, afterWaiting waited: Bool = false) {
        let limit = limits.maxConnectionsPerUID
        if core.peers.withLock({ $0.openConnection(uid: peer.uid, limit: limit) }) {
            access.countedUID = peer.uid
            return
        }
        if !waited, deferAdmission(of: peer) { return }
        core.stats.rejectedConnections.add()
        core.metrics.refusedOverUIDMax.increment()
        noteLimited("connection.refused", ["reason": "max_connections_per_uid", "limit": "\(limit)", "audit": "true"])
        let error = ProtocolError.overloaded(
            "uid \(peer.uid) has \(limit) connections open, its limit ([server] max_connections_per_uid)", retryAfterMs: 1000)
        write(Response(id: nil, outcome: .failure(error)))
        machine.closed()
        closeAfterWritesOnce()
    }

    func releaseUID() {
        guard let uid = access.countedUID else { return }
        access.countedUID = nil
        let (now, rate, burst) = (now, limits.requestsPerSecond, limits.requestBurst)
        core.peers.withLock { $0.closeConnection(uid: uid, now: now, rate: rate, burst: burst) }
    }

    /// `overloaded` when the peer's uid is over its request rate, else `nil`.
    func rateRefusal() -> ProtocolError? {
        guard let uid = access.countedUID else { return nil }
        let (rate, burst) = (limits.requestsPerSecond, limits.requestBurst)
        guard let wait = core.peers.withLock({ $0.takeRequest(uid: uid, now: now, rate: rate, burst: burst) }) else {
            return nil
        }
        access.refusals += 1
        noteLimited("request.rate_limited", ["audit": "true"], atNotice: access.refusals == 1)
        let milliseconds = Int((wait.nanoseconds + 999_999) / 1_000_000)
        return .overloaded(
            "uid \(uid) is over its request rate ([server] requests_per_second_per_uid)", retryAfterMs: max(1, milliseconds))
    }

    /// Logs a connection's `event` at notice within the server's log rate (`LogRate`), else at debug.
    /// `atNotice: false` logs at debug in any case (a repeat on one connection).
    func noteLimited(_ event: String, _ metadata: Logger.Metadata, atNotice: Bool = true) {
        guard logger.logLevel <= .notice else { return }
        var metadata = metadata
        var level = Logger.Level.debug
        if atNotice, core.admitLog(event, metadata: &metadata) { level = .notice }
        logger.log(level: level, "\(event)", metadata: metadata)
    }

    /// The client does not read what it asked for: close rather than hold more for it.
    func cutSlowReader() {
        let unsent = unsentBytes
        core.stats.slowReaders.add()
        core.metrics.slowReaders.increment()
        noteLimited("connection.slow_reader", ["unsent_bytes": "\(unsent)", "limit": "\(limits.maxUnsentBytes)", "audit": "true"])
        machine.closed()
        closing = true
        closeNow()
    }

    /// The peer's credentials are known: it is logged as such, and counts towards its uid's limit.
    func identified(as peer: PeerCredentials?) {
        access.peer = peer
        access.version = .max
        guard let peer else { return }
        logger[metadataKey: "peer_uid"] = "\(peer.uid)"
        logger[metadataKey: "peer_pid"] = "\(peer.pid)"
        admit(peer)
    }

    /// The error for `op` when the peer may not use its group, else `nil`. The allowed groups are
    /// worked out again only when the policy changed (a reload).
    func refusal(of op: String, requiring required: AccessPolicy.Groups) -> ProtocolError? {
        let version = core.access.currentVersion
        if version != access.version { (access.allowed, access.version) = core.access.allowed(for: access.peer) }
        guard access.allowed.isDisjoint(with: required) else { return nil }
        let group = AccessPolicy.group(of: op)?.rawValue ?? "admin"
        let who: String
        switch access.peer {
        case let peer? where peer.uid == PeerCredentials.overflowIDs.user:
            who = "uid \(peer.uid) (the overflow uid: a user keyholed's user namespace does not map, so unknown)"
        case let peer?: who = "uid \(peer.uid)"
        case nil: who = "a peer of unknown credentials"
        }
        access.refusals += 1
        // The connection's logger carries peer_uid and peer_pid.
        noteLimited("access.denied", ["op": "\(op)", "group": "\(group)", "audit": "true"], atNotice: access.refusals == 1)
        return .permissionDenied("'\(op)' is in operation group '\(group)', which \(who) may not use ([[access]] in keyholed.toml)")
    }
}
