import Foundation
import KeyholeSocketLoop
import NIOCore
import Synchronization
import Testing

#if canImport(Glibc)
import Glibc
#endif

/// A delegate for tests: echoes what it receives (or what `reply` makes of it), and records what happened.
final class EchoDelegate: SocketConnectionDelegate {
    let events: Events
    var reply: (ByteBuffer, SocketConnection) -> Void

    init(events: Events, reply: @escaping (ByteBuffer, SocketConnection) -> Void = EchoDelegate.echo) {
        self.events = events
        self.reply = reply
    }

    static func echo(_ bytes: ByteBuffer, _ connection: SocketConnection) {
        var bytes = bytes
        connection.output.writeBuffer(&bytes)
        connection.outputAdded()
    }

    func received(_ bytes: ByteBuffer, on connection: SocketConnection) {
        events.add("received \(bytes.readableBytes)")
        reply(bytes, connection)
    }

    func inputClosed(on connection: SocketConnection) {
        events.add("input closed")
        connection.closeAfterWrites()
    }

    func writabilityChanged(on connection: SocketConnection) {
        events.add("writable \(connection.isWritable)")
    }

    func deadlineReached(now: NIODeadline, on connection: SocketConnection) {
        events.add("deadline")
        connection.close()
    }

    func quiesce(on connection: SocketConnection) {
        events.add("quiesce")
        connection.closeAfterWrites()
    }

    func closed(_ connection: SocketConnection) {
        events.add("closed")
    }
}

/// What happened, in order, over every connection of a test.
final class Events: Sendable {
    private let list = Mutex<[String]>([])
    func add(_ event: String) { list.withLock { $0.append(event) } }
    var all: [String] { list.withLock { $0 } }
}

/// A listening socket in a directory of its own, and blocking clients for it.
struct TestSocket {
    let path: String
    let fd: CInt

    init() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("keyhole-loop-\(UUID().uuidString.prefix(8))")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        path = directory.appendingPathComponent("s").path
        fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try Self.withAddress(path) { address, length in
            guard bind(fd, address, length) == 0, listen(fd, 64) == 0 else { throw Failure("bind: \(errno)") }
        }
    }

    static func withAddress<T>(_ path: String, _ body: (UnsafePointer<sockaddr>, socklen_t) throws -> T) rethrows -> T {
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { raw in
            raw.copyBytes(from: Array(path.utf8) + [0])
        }
        return try withUnsafePointer(to: &address) {
            try $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { try body($0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
    }

    /// A connected, blocking client socket.
    func connect() throws -> CInt {
        let client = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        try Self.withAddress(path) { address, length in
            guard Glibc.connect(client, address, length) == 0 else { throw Failure("connect: \(errno)") }
        }
        return client
    }

    static func send(_ fd: CInt, _ bytes: [UInt8]) throws {
        var sent = 0
        while sent < bytes.count {
            let count = bytes[sent...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            guard count > 0 else { throw Failure("write: \(errno)") }
            sent += count
        }
    }

    /// Reads until `count` bytes came, or end of file.
    static func receive(_ fd: CInt, count: Int) -> [UInt8] {
        var received: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while received.count < count {
            let n = chunk.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            guard n > 0 else { break }
            received += chunk[..<n]
        }
        return received
    }

    /// Reads until end of file.
    static func receiveAll(_ fd: CInt) -> [UInt8] { receive(fd, count: .max) }
}

struct Failure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs `body` on `loop` and returns what it returns.
func onLoop<T: Sendable>(_ loop: SocketLoop, _ body: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        loop.execute { continuation.resume(returning: body()) }
    }
}

@Suite("SocketLoop: keyholed's own event loop, on real sockets")
struct SocketLoopTests {
    /// A started group of `count` loops whose connections get an `EchoDelegate` made by `delegate`.
    func start(
        _ socket: TestSocket, loops count: Int = 2, events: Events,
        delegate: @escaping @Sendable (Events) -> EchoDelegate = { EchoDelegate(events: $0) },
        configuration: SocketLoop.Configuration = .init()
    ) throws -> (SocketLoopGroup, Events) {
        let group = try SocketLoopGroup(count: count, configuration: configuration)
        let released = events
        group.start(
            listeningOn: socket.fd,
            accepted: { connection in connection.delegate = delegate(events) },
            failed: { _, code in events.add("accept failed \(code)") },
            released: { released.add("released") })
        return (group, events)
    }

    @Test("many connections over two loops each get their own bytes back")
    func echo() async throws {
        let socket = try TestSocket()
        let (group, _) = try start(socket, events: Events())
        var clients: [CInt] = []
        for index in 0..<20 {
            let client = try socket.connect()
            try TestSocket.send(client, Array("hello \(index)".utf8))
            clients.append(client)
        }
        for (index, client) in clients.enumerated() {
            #expect(TestSocket.receive(client, count: "hello \(index)".utf8.count) == Array("hello \(index)".utf8))
            close(client)
        }
        group.stop()
        await group.finished()
        #expect(!group.isRunning)
    }

    @Test("jobs from other threads run on the loop's thread, in order, and see it as current")
    func jobs() async throws {
        let group = try SocketLoopGroup(count: 1)
        let socket = try TestSocket()
        group.start(listeningOn: socket.fd, accepted: { _ in }, failed: { _, _ in }, released: {})
        let loop = group.loops[0]
        #expect(!loop.inLoop)
        let seen = Events()
        await withTaskGroup(of: Void.self) { tasks in
            for index in 0..<100 {
                tasks.addTask { loop.execute { seen.add("\(index)") } }
            }
        }
        let (inLoop, current, count) = await onLoop(loop) { (loop.inLoop, SocketLoop.current === loop, seen.all.count) }
        #expect(inLoop && current)
        #expect(count == 100)
        group.stop()
        await group.finished()
    }

    @Test("a big answer goes out whole through incomplete writes, then close after writes closes")
    func bigAnswer() async throws {
        let socket = try TestSocket()
        let events = Events()
        let size = 4 << 20
        let (group, _) = try start(socket, events: events, delegate: { events in
            EchoDelegate(events: events) { _, connection in
                connection.output.writeRepeatingByte(7, count: size)
                connection.outputAdded()
                connection.closeAfterWrites()
            }
        })
        let client = try socket.connect()
        try TestSocket.send(client, [1])
        let answer = TestSocket.receiveAll(client)
        #expect(answer.count == size)
        #expect(answer.allSatisfy { $0 == 7 })
        close(client)
        group.stop()
        await group.finished()
        #expect(events.all.contains("writable false"), "4 MiB passes the high mark: \(events.all)")
        #expect(events.all.contains("closed"))
    }

    @Test("back pressure: a connection that stops reading is not read until it reads again")
    func backPressure() async throws {
        let socket = try TestSocket()
        let events = Events()
        let holder = ConnectionHolder()
        let (group, _) = try start(socket, loops: 1, events: events, delegate: { events in
            EchoDelegate(events: events) { bytes, connection in
                EchoDelegate.echo(bytes, connection)
                connection.setReading(false)
                holder.connection = connection
            }
        })
        let client = try socket.connect()
        try TestSocket.send(client, [1, 2, 3])
        #expect(TestSocket.receive(client, count: 3) == [1, 2, 3])
        try TestSocket.send(client, [4, 5])
        // The bytes are in the kernel before this job is queued: a loop that watched the socket would
        // read them in the pass that runs the job, before the job.
        let loop = group.loops[0]
        let receivedBefore = await onLoop(loop) { events.all.filter { $0.hasPrefix("received") }.count }
        #expect(receivedBefore == 1)
        await onLoop(loop) { holder.connection?.setReading(true) }
        #expect(TestSocket.receive(client, count: 2) == [4, 5])
        close(client)
        group.stop()
        await group.finished()
    }

    @Test("a deadline is reached, by the sweep, not much before it is due")
    func deadline() async throws {
        let socket = try TestSocket()
        let events = Events()
        let (group, _) = try start(socket, events: events, delegate: { events in
            EchoDelegate(events: events) { _, connection in
                connection.deadline = .now() + .milliseconds(150)
            }
        })
        let client = try socket.connect()
        let started = NIODeadline.now()
        try TestSocket.send(client, [1])
        #expect(TestSocket.receiveAll(client).isEmpty)
        #expect(NIODeadline.now() - started >= .milliseconds(150))
        #expect(events.all.contains("deadline"))
        close(client)
        group.stop()
        await group.finished()
    }

    @Test("graceful shutdown: each connection is asked to finish, the listener is released, the loops end")
    func quiesce() async throws {
        let socket = try TestSocket()
        let events = Events()
        let (group, _) = try start(socket, events: events)
        let client = try socket.connect()
        try TestSocket.send(client, [9])
        #expect(TestSocket.receive(client, count: 1) == [9])
        group.quiesce()
        #expect(TestSocket.receiveAll(client).isEmpty, "closed after its writes")
        await group.finished()
        #expect(events.all.contains("quiesce"))
        #expect(events.all.contains("released"))
        #expect(events.all.contains("closed"))
        close(client)
    }

    @Test("a client gone before its answer is sent costs the connection, not the process (no SIGPIPE)")
    func peerGoneBeforeAnswer() async throws {
        let socket = try TestSocket()
        let events = Events()
        let (group, _) = try start(socket, loops: 1, events: events, delegate: { events in
            EchoDelegate(events: events) { bytes, connection in
                guard bytes.readableBytes == 1 else { return EchoDelegate.echo(bytes, connection) }
                connection.output.writeRepeatingByte(1, count: 1 << 20)
                connection.outputAdded()
            }
        })
        for _ in 0..<20 {
            let client = try socket.connect()
            try TestSocket.send(client, [1])
            close(client)
        }
        let client = try socket.connect()
        try TestSocket.send(client, [1, 2])
        #expect(TestSocket.receive(client, count: 2) == [1, 2], "still serving")
        close(client)
        group.stop()
        await group.finished()
    }

    @Test("a client that finishes sending gets its answers, then end of file")
    func halfClose() async throws {
        let socket = try TestSocket()
        let events = Events()
        let (group, _) = try start(socket, events: events)
        let client = try socket.connect()
        try TestSocket.send(client, Array("last words".utf8))
        shutdown(client, Int32(SHUT_WR))
        #expect(TestSocket.receiveAll(client) == Array("last words".utf8))
        close(client)
        group.stop()
        await group.finished()
        #expect(events.all.contains("input closed"))
    }
}

/// A connection kept for a test's job on the connection's loop (only that loop's thread touches it).
final class ConnectionHolder: @unchecked Sendable {
    var connection: SocketConnection?
}
