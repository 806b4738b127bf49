import CKeyholeLinux
import NIOCore

#if canImport(Glibc)
import Glibc
#endif

/// One accepted connection of a `SocketLoop`: its socket, the output waiting to be sent, and what the
/// socket is watched for (`SocketIOState`). Used only on its loop's thread.
///
/// Output is written into `output` and sent once per loop pass, after the pass's reads (as Redis sends
/// its replies before it sleeps).
public final class SocketConnection {
    /// The socket. Valid until `closed`.
    public let fd: CInt
    /// Tells apart a connection from an earlier one that had the same descriptor, in events already
    /// read from epoll when it closed.
    let generation: UInt32
    /// The loop that owns the connection.
    public unowned let loop: SocketLoop
    /// Serves the connection; set by the loop's accept handler, dropped at close.
    public var delegate: (any SocketConnectionDelegate)?
    /// Output not yet sent. Append to it, then call `outputAdded()`.
    public var output = ByteBuffer()
    var io: SocketIOState
    var inFlushList = false
    /// When the delegate wants `deadlineReached` (checked by the loop's sweep, at most `sweepInterval` late).
    public var deadline: NIODeadline? {
        didSet {
            if let deadline { loop.deadlineSet(deadline) }
        }
    }

    init(fd: CInt, generation: UInt32, loop: SocketLoop) {
        self.fd = fd
        self.generation = generation
        self.loop = loop
        self.io = SocketIOState(marks: loop.configuration.writeMarks)
    }

    /// Whether the output waiting is below the marks (see `SocketIOState`).
    public var isWritable: Bool { io.writable }

    /// Bytes written into `output` and not yet sent.
    public var unsentBytes: Int { output.readableBytes }

    /// Whether the connection is closed (nothing more is read, sent or called).
    public var isClosed: Bool { io.closed }

    /// Watch the socket for input, or stop (back pressure): bytes wait in the kernel meanwhile.
    public func setReading(_ wanted: Bool) {
        apply(io.setReading(wanted))
    }

    /// Output was added: it is sent at the end of this loop pass. Past the high mark the connection
    /// becomes unwritable at once, so that its owner stops taking requests.
    public func outputAdded() {
        guard !io.closed else { return }
        if io.queued(output.readableBytes) != nil { delegate?.writabilityChanged(on: self) }
        flushAtEndOfPass()
    }

    private func flushAtEndOfPass() {
        guard !inFlushList else { return }
        inFlushList = true
        loop.flushList.append(self)
    }

    /// Sends what it can of `output` now.
    func flush() {
        inFlushList = false
        guard !io.closed else { return }
        while output.readableBytes > 0 {
            // send(2) with MSG_NOSIGNAL, not write(2): a peer gone meanwhile must cost an EPIPE, never
            // a SIGPIPE, which would end the process.
            let written = output.withUnsafeReadableBytes { bytes in
                send(fd, bytes.baseAddress!, bytes.count, Int32(MSG_NOSIGNAL))
            }
            if written < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN { break }
                // EPIPE or ECONNRESET: nobody reads what is left.
                close()
                return
            }
            output.moveReaderIndex(forwardBy: written)
        }
        if output.readableBytes == 0 {
            // The storage is ours alone (the kernel copied it): kept for the next answers unless a big
            // batch grew it.
            if output.capacity <= loop.configuration.keptOutputBytes {
                output.clear()
            } else {
                output = ByteBuffer()
            }
        }
        apply(io.wrote(unsent: output.readableBytes))
    }

    /// Stops reading, and closes once all output so far is sent.
    public func closeAfterWrites() {
        apply(io.closeAfterWrites(unsent: output.readableBytes))
        if !io.closed, output.readableBytes > 0 { flushAtEndOfPass() }
    }

    /// Closes now; unsent output is dropped. The delegate's `closed` is called once.
    public func close() {
        guard !io.closed else { return }
        io.close()
        loop.remove(self)
        let delegate = self.delegate
        self.delegate = nil
        deadline = nil
        delegate?.closed(self)
    }

    func apply(_ effects: SocketIOState.Effects) {
        if effects.eventsChanged { loop.watch(self) }
        if effects.writability != nil { delegate?.writabilityChanged(on: self) }
        if effects.close { close() }
    }

    /// What epoll is to watch for now, tagged with the descriptor and the generation.
    var epollEvent: epoll_event {
        var event = epoll_event()
        event.events = (io.watchingReads ? EPOLLIN.rawValue : 0) | (io.watchingWrites ? EPOLLOUT.rawValue : 0)
        event.data.u64 = UInt64(generation) << 32 | UInt64(UInt32(bitPattern: fd))
        return event
    }
}
