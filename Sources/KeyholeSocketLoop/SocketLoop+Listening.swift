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
            // Tried again after a while: a resumption due now would make every wait return at once.
            if listener.pausedUntil != nil { listener.pausedUntil = .now() + configuration.acceptPause }
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

    /// A connection just accepted was refused at connect: once this pass's accepts are done, the
    /// loop stops accepting for `Configuration.refusalPause`. On the loop's thread, from `accepted`.
    public func pauseAccepting() {
        precondition(inLoop, "pauseAccepting: on the loop")
        refusedThisPass = true
    }

    /// Accepts up to `acceptsPerWake` connections. Returns whether more may be waiting (it took that
    /// many without finding the backlog empty).
    /// `stoppingAtRefusal`: stop after a connection refused at connect (`pauseAccepting`), and say
    /// no more are waiting.
    @discardableResult
    func acceptAll(stoppingAtRefusal: Bool = false) -> Bool {
        guard let listener else { return false }
        var accepted = false
        defer {
            if refusedThisPass {
                refusedThisPass = false
                pauseListening(for: nextRefusalPause)
                nextRefusalPause = min(nextRefusalPause * 2, max(configuration.maxRefusalPause, configuration.refusalPause))
            } else if accepted {
                nextRefusalPause = configuration.refusalPause
            }
        }
        for _ in 0..<configuration.acceptsPerWake {
            let fd = ckeyhole_accept4(listener.fd, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
            if fd < 0 {
                switch errno {
                case EINTR, ECONNABORTED:
                    continue
                case EAGAIN:
                    return false
                case EMFILE, ENFILE, ENOBUFS, ENOMEM:
                    // Level-triggered, the socket would wake the loop on every pass until a descriptor
                    // frees up: look away for a moment instead.
                    listener.failed(errno)
                    pauseListening(for: configuration.acceptPause)
                    return false
                default:
                    listener.failed(errno)
                    return false
                }
            }
            accepted = true
            adopt(fd, accepted: listener.accepted)
            if stoppingAtRefusal, refusedThisPass { return false }
        }
        return true
    }

    private func pauseListening(for pause: TimeAmount) {
        guard var listener, listener.watched else { return }
        epoll_ctl(poll, EPOLL_CTL_DEL, listener.fd, nil)
        listener.watched = false
        // Resumed by the pass that ends the wait bounded by it (`run`, `waitMilliseconds`).
        listener.pausedUntil = NIODeadline.now() + pause
        self.listener = listener
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

    /// At most this many `acceptAll` passes take the backlog at shutdown, so that a flood of
    /// connections cannot hold it off.
    static let backlogPassesAtQuiesce = 64

    /// Graceful shutdown: stops accepting, asks every connection's delegate to finish (`quiesce`), and
    /// ends the thread once none is left. On the loop's thread.
    public func quiesce() {
        precondition(inLoop, "quiesce: on the loop")
        guard !quiescing else { return }
        quiescing = true
        // Connections already in the backlog are taken, and quiesced below like the rest: their
        // clients have sent or are sending a request, which keyholed answers before it says goodbye.
        // Left there, they would be reset when keyholed holds the socket's last reference (the socket
        // unit stopped too), failing a request that may have been a change.
        // Up to the first refusal (a limit): the rest stay in the backlog, where the next keyholed on
        // a socket systemd holds serves them, rather than being refused here.
        var passes = 0
        while passes < Self.backlogPassesAtQuiesce, acceptAll(stoppingAtRefusal: true) { passes += 1 }
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
