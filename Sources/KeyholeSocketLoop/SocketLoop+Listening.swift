import CKeyholeLinux
import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// Accepting connections, and the end of the loop.
extension SocketLoop {
    /// What a loop does with the listening socket it shares with the other loops of its group.
    struct Listener {
        let fd: CInt
        /// Runs for each connection accepted, on the loop's thread: sets the connection's delegate, or
        /// closes it.
        let accepted: (SocketConnection) -> Void
        /// Runs when accept(2) fails other than for want of a connection (errno).
        let failed: (CInt) -> Void
        /// Called once the loop no longer watches the socket.
        let released: () -> Void
        var watched = false
        /// Out of descriptors: accepting resumes then.
        var pausedUntil: NIODeadline?
    }

    /// Accepts connections from `fd` (listening, non-blocking) until `quiesce`. Every loop of a group
    /// watches the one socket with EPOLLEXCLUSIVE: a new connection wakes one of them. On the loop's thread.
    public func listen(
        on fd: CInt, accepted: @escaping (SocketConnection) -> Void, failed: @escaping (CInt) -> Void,
        released: @escaping () -> Void
    ) {
        precondition(inLoop && listener == nil && !quiescing, "listen: once, on the loop, before quiesce")
        listener = Listener(fd: fd, accepted: accepted, failed: failed, released: released)
        startListening()
    }

    func startListening() {
        guard var listener, !listener.watched else { return }
        var event = epoll_event()
        event.events = EPOLLIN.rawValue | EPOLLEXCLUSIVE.rawValue
        event.data.u64 = Self.listenerTag
        if epoll_ctl(poll, EPOLL_CTL_ADD, listener.fd, &event) == 0 {
            listener.watched = true
            listener.pausedUntil = nil
        } else {
            listener.failed(errno)
        }
        self.listener = listener
    }

    func stopListening() {
        guard var listener else { return }
        if listener.watched { epoll_ctl(poll, EPOLL_CTL_DEL, listener.fd, nil) }
        listener.watched = false
        self.listener = nil
        listener.released()
    }

    func acceptAll() {
        guard let listener else { return }
        for _ in 0..<configuration.acceptsPerWake {
            let fd = ckeyhole_accept4(listener.fd, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
            if fd < 0 {
                switch errno {
                case EINTR, ECONNABORTED:
                    continue
                case EAGAIN:
                    return
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    // Level-triggered, the socket would wake the loop on every pass until a descriptor
                    // frees up: look away for a moment instead.
                    listener.failed(errno)
                    pauseListening()
                    return
                default:
                    listener.failed(errno)
                    return
                }
            }
            adopt(fd, accepted: listener.accepted)
        }
    }

    private func pauseListening() {
        guard var listener, listener.watched else { return }
        epoll_ctl(poll, EPOLL_CTL_DEL, listener.fd, nil)
        listener.watched = false
        let resumesAt = NIODeadline.now() + configuration.acceptPause
        listener.pausedUntil = resumesAt
        self.listener = listener
        deadlineSet(resumesAt)
    }

    private func adopt(_ fd: CInt, accepted: (SocketConnection) -> Void) {
        generation &+= 1
        let connection = SocketConnection(fd: fd, generation: generation, loop: self)
        while Int(fd) >= connections.count {
            connections.append(contentsOf: repeatElement(nil, count: max(64, connections.count)))
        }
        connections[Int(fd)] = connection
        connectionCount += 1
        var event = connection.epollEvent
        guard epoll_ctl(poll, EPOLL_CTL_ADD, fd, &event) == 0 else {
            connection.close()
            return
        }
        accepted(connection)
    }

    // MARK: Ending

    /// Graceful shutdown: stops accepting, asks every connection's delegate to finish (`quiesce`), and
    /// ends the thread once none is left. On the loop's thread.
    public func quiesce() {
        precondition(inLoop, "quiesce: on the loop")
        guard !quiescing else { return }
        quiescing = true
        stopListening()
        for index in connections.indices {
            guard let connection = connections[index] else { continue }
            connection.delegate?.quiesce(on: connection)
        }
    }

    /// Ends at once: closes every connection (dropping what was not sent) and the thread. On the loop's thread.
    public func stop() {
        precondition(inLoop, "stop: on the loop")
        quiescing = true
        stopListening()
        for index in connections.indices {
            connections[index]?.close()
        }
    }
}
