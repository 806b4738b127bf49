import ArgumentParser
import CKeyholeLinux

#if canImport(Glibc)
import Glibc
#endif

/// `keyhole-bench raw-floor-server`: `floor-server`'s work (cut frames, answer each with canned bytes)
/// on a plain epoll loop in Swift, without SwiftNIO (issue 31).
///
/// What a purpose-built event loop could cost per request, set beside `floor-server` (SwiftNIO's channel
/// pipeline doing the same) and Redis: one thread, level-triggered epoll, accept4, one read into a
/// per-connection buffer per readiness, frames cut in place, answers appended to a per-connection output
/// buffer and written once per connection per loop pass (as Redis writes its replies before it sleeps),
/// EPOLLOUT only while a write is incomplete. No allocation per request.
struct RawFloorServer: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "raw-floor-server",
        abstract: "floor-server on a plain epoll loop, without SwiftNIO: what a purpose-built loop costs per request.",
        discussion: "Runs until interrupted. Drive it with: lean-load --socket PATH --server-pid PID"
    )

    @Option(help: "The socket to listen on (whatever is at that path is removed first: a bench tool's socket only).")
    var socket: String

    @Option(help: "The size of each answer's body in bytes (session.get's answer with a user is about 420).")
    var replyBytes = 420

    func validate() throws {
        try FloorServer.validate(replyBytes: replyBytes)
    }

    func run() throws {
        let reply = Array(FloorServer.reply(bytes: replyBytes).readableBytesView)

        // A client gone while its answer is written must cost an EPIPE, not the process.
        signal(SIGPIPE, SIG_IGN)
        unlink(socket)
        let listener = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard listener >= 0 else { throw RawLoopError("socket", errno) }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        let path = Array(socket.utf8)
        guard path.count < MemoryLayout.size(ofValue: address.sun_path) else { throw ValidationError("--socket is too long") }
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: path)
            raw[path.count] = 0
        }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(listener, 512) == 0 else { throw RawLoopError("bind/listen", errno) }
        let loop = try RawLoop(listener: listener, reply: reply)
        print("raw-floor-server: pid \(getpid()), socket \(socket), \(reply.count) bytes per answer")
        try loop.run()
    }
}

struct RawLoopError: Error, CustomStringConvertible {
    let description: String
    init(_ call: String, _ code: Int32) { description = "\(call): \(String(cString: strerror(code)))" }
}

/// The loop: connections indexed by descriptor, a list of those with answers to write.
private final class RawLoop {
    private final class Connection {
        let fd: Int32
        let input = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 8)
        var inputUsed = 0
        var output = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 8)
        var outputUsed = 0
        var outputSent = 0
        var pending = false
        var watchingWrites = false
        var closed = false

        init(fd: Int32) { self.fd = fd }

        deinit {
            input.deallocate()
            output.deallocate()
        }

        func append(_ bytes: UnsafeRawBufferPointer) {
            if outputUsed + bytes.count > output.count {
                let bigger = UnsafeMutableRawBufferPointer.allocate(byteCount: max(output.count * 2, outputUsed + bytes.count), alignment: 8)
                bigger.copyMemory(from: UnsafeRawBufferPointer(rebasing: output[..<outputUsed]))
                output.deallocate()
                output = bigger
            }
            (output.baseAddress! + outputUsed).copyMemory(from: bytes.baseAddress!, byteCount: bytes.count)
            outputUsed += bytes.count
        }
    }

    private let poll: Int32
    private let listener: Int32
    private let reply: UnsafeMutableRawBufferPointer
    private var connections: [Connection?] = Array(repeating: nil, count: 1024)
    private var pending: [Connection] = []

    init(listener: Int32, reply: [UInt8]) throws {
        self.listener = listener
        self.reply = UnsafeMutableRawBufferPointer.allocate(byteCount: reply.count, alignment: 8)
        self.reply.copyBytes(from: reply)
        poll = epoll_create1(Int32(EPOLL_CLOEXEC))
        guard poll >= 0 else { throw RawLoopError("epoll_create1", errno) }
        try watch(listener, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD)
        pending.reserveCapacity(1024)
    }

    private func watch(_ fd: Int32, events: UInt32, operation: Int32) throws {
        var event = epoll_event()
        event.events = events
        event.data.fd = fd
        guard epoll_ctl(poll, operation, fd, &event) == 0 else { throw RawLoopError("epoll_ctl", errno) }
    }

    func run() throws {
        let events = UnsafeMutablePointer<epoll_event>.allocate(capacity: 256)
        defer { events.deallocate() }
        while true {
            let ready = epoll_wait(poll, events, 256, -1)
            if ready < 0 {
                if errno == EINTR { continue }
                throw RawLoopError("epoll_wait", errno)
            }
            for index in 0..<Int(ready) {
                let fd = events[index].data.fd
                if fd == listener {
                    try acceptAll()
                } else if let connection = connections[Int(fd)] {
                    if events[index].events & EPOLLOUT.rawValue != 0 { try write(connection) }
                    if events[index].events & (EPOLLIN.rawValue | EPOLLHUP.rawValue | EPOLLERR.rawValue) != 0 {
                        readable(connection)
                    }
                }
            }
            // Answers go out once per connection per pass, before the loop sleeps again.
            for connection in pending { try write(connection) }
            pending.removeAll(keepingCapacity: true)
        }
    }

    private func acceptAll() throws {
        while true {
            let fd = ckeyhole_accept4(listener, Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue))
            if fd < 0 { return }
            while Int(fd) >= connections.count { connections += Array(repeating: nil, count: connections.count) }
            connections[Int(fd)] = Connection(fd: fd)
            try watch(fd, events: EPOLLIN.rawValue, operation: EPOLL_CTL_ADD)
        }
    }

    private func readable(_ connection: Connection) {
        let space = connection.input.count - connection.inputUsed
        let count = read(connection.fd, connection.input.baseAddress! + connection.inputUsed, space)
        if count == 0 || (count < 0 && errno != EAGAIN && errno != EINTR) {
            close(connection)
            return
        }
        guard count > 0 else { return }
        connection.inputUsed += count
        var at = 0
        let input = connection.input
        while connection.inputUsed - at >= 4 {
            let length = Int(input[at]) << 24 | Int(input[at + 1]) << 16 | Int(input[at + 2]) << 8 | Int(input[at + 3])
            guard length <= input.count - 4 else {
                close(connection)
                return
            }
            guard connection.inputUsed - at >= 4 + length else { break }
            at += 4 + length
            connection.append(UnsafeRawBufferPointer(reply))
        }
        if at > 0 {
            let left = connection.inputUsed - at
            if left > 0 { input.baseAddress!.copyMemory(from: input.baseAddress! + at, byteCount: left) }
            connection.inputUsed = left
        }
        if connection.outputUsed > connection.outputSent, !connection.pending {
            connection.pending = true
            pending.append(connection)
        }
    }

    private func write(_ connection: Connection) throws {
        connection.pending = false
        guard !connection.closed else { return }
        while connection.outputSent < connection.outputUsed {
            let count = Glibc.write(connection.fd, connection.output.baseAddress! + connection.outputSent,
                                    connection.outputUsed - connection.outputSent)
            if count < 0 {
                if errno == EINTR { continue }
                if errno == EAGAIN { break }
                close(connection)
                return
            }
            connection.outputSent += count
        }
        let done = connection.outputSent == connection.outputUsed
        if done {
            connection.outputUsed = 0
            connection.outputSent = 0
        }
        // Writability is watched only while a write is incomplete: level-triggered EPOLLOUT would wake
        // the loop for every pass otherwise.
        if done == connection.watchingWrites {
            connection.watchingWrites = !done
            try watch(connection.fd, events: EPOLLIN.rawValue | (done ? 0 : EPOLLOUT.rawValue), operation: EPOLL_CTL_MOD)
        }
    }

    private func close(_ connection: Connection) {
        guard !connection.closed else { return }
        connection.closed = true
        epoll_ctl(poll, EPOLL_CTL_DEL, connection.fd, nil)
        Glibc.close(connection.fd)
        connections[Int(connection.fd)] = nil
    }
}
