import KeyholeProtocol
import Logging
import NIOCore

/// The limits a connection is held to besides back pressure: its uid's connections and request
/// rate (`PeerLimits`), its unsent output, and how often its events may be logged (`LogRate`).
extension ServedConnection {
    /// Counts the connection towards its uid's limit, or refuses it when the uid is at the limit or
    /// over its rate of new connections.
    ///
    /// At the limit with connections open, the loop may look again once every hang-up already
    /// signalled has been read (`deferAdmission`): a client that closed a connection and at once
    /// opened another must not be refused for the one it no longer has, which the loops may not have
    /// read yet.
    ///
    /// A refusal is answered `PeerLimits.refusalDelay` later (`holdRefused`) where the loop can: a
    /// client cycling through refused connections then waits that long for each, rather than
    /// keyholed answering as fast as it can connect. Its `retry_after_ms` counts from the answer.
    func admit(_ peer: PeerCredentials, afterWaiting waited: Bool = false) {
        let (limit, rates, now) = (limits.maxConnectionsPerUID, limits.rates, now)
        let (admission, firstHeldFrees) = core.peers.withLock {
            ($0.openConnection(uid: peer.uid, limit: limit, now: now, rates: rates), $0.firstHeldFrees(of: peer.uid))
        }
        let message: String, wait: TimeAmount
        switch admission {
        case .admitted:
            access.countedUID = peer.uid
            return
        case .atLimit(let open, let held):
            if open > 0, !waited, deferAdmission(of: peer) { return }
            core.metrics.refusedOverUIDMax.increment()
            noteLimited("connection.refused", ["reason": "max_connections_per_uid", "limit": "\(limit)", "held": "\(held)", "audit": "true"])
            let holding = held == 0 ? "" : " (\(held) of them held after frame errors, [server] frame_error_hold)"
            message = "uid \(peer.uid) has \(open + held) connections open\(holding), its limit ([server] max_connections_per_uid)"
            // A held slot is sure to free up then; an open connection may close any time.
            wait = open == 0 ? (firstHeldFrees.map { $0 - now } ?? .seconds(1)) : .seconds(1)
        case .overRate(let untilToken):
            core.metrics.refusedOverUIDRate.increment()
            noteLimited("connection.refused", ["reason": "connections_per_second_per_uid", "audit": "true"])
            message = "uid \(peer.uid) is over its rate of new connections ([server] connections_per_second_per_uid)"
            wait = untilToken
        }
        core.stats.rejectedConnections.add()
        machine.closed()
        pauseAccepting()
        let held = holdsRefusals && core.peers.withLock { $0.holdRefusal(uid: peer.uid) }
        let delay = held ? PeerLimits.refusalDelay : .zero
        let error = ProtocolError.overloaded(message, retryAfterMs: max(1, Int(((wait - delay).nanoseconds + 999_999) / 1_000_000)))
        guard held else { return answerRefusal(error) }
        access.heldRefusal = (peer.uid, error)
        holdRefused(until: now + delay)
    }

    /// Answers a connection refused at connect, and closes it.
    func answerRefusal(_ error: ProtocolError) {
        write(Response(id: nil, outcome: .failure(error)))
        closeAfterWritesOnce()
    }

    func releaseUID() {
        if let (uid, _) = access.heldRefusal {
            access.heldRefusal = nil
            let (now, rates) = (now, limits.rates)
            core.peers.withLock { $0.releaseRefusal(uid: uid, now: now, rates: rates) }
        }
        guard let uid = access.countedUID else { return }
        access.countedUID = nil
        let (now, rates) = (now, limits.rates)
        let holding = access.committedFrameError && limits.frameErrorHold > .zero ? now + limits.frameErrorHold : nil
        core.peers.withLock { $0.closeConnection(uid: uid, now: now, rates: rates, holding: holding) }
    }

    /// `overloaded` when the peer's uid is over its request rate, else `nil`.
    func rateRefusal() -> ProtocolError? {
        guard let uid = access.countedUID else { return nil }
        let rates = limits.rates
        guard let wait = core.peers.withLock({ $0.takeRequest(uid: uid, now: now, rates: rates) }) else {
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
        requestContext = nil
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
