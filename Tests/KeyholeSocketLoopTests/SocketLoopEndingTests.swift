import Foundation
import KeyholeTestSupport
import NIOCore
import Synchronization
import Testing

@testable import KeyholeSocketLoop

#if canImport(Glibc)
import Glibc
#endif

/// What happens around the end of a loop (found by the review of its first version).
@Suite("SocketLoop: the end of a loop")
struct SocketLoopEndingTests {
    /// The descriptor the loop's epoll instance reports for its eventfd (registered with data = UInt64.max).
    static func wakeDescriptor(of loop: SocketLoop) throws -> CInt {
        let info = try String(contentsOfFile: "/proc/self/fdinfo/\(loop.poll)", encoding: .utf8)
        for line in info.split(separator: "\n") where line.hasPrefix("tfd:") && line.contains("data: ffffffffffffffff") {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            if let fd = CInt(fields[1]) { return fd }
        }
        throw RawConnection.Failure(description: "no eventfd in \(info)")
    }

    /// The inode behind `fd`, or nil when `fd` is closed.
    static func inode(_ fd: CInt) -> UInt64? {
        var status = stat()
        guard fstat(fd, &status) == 0 else { return nil }
        return UInt64(status.st_ino)
    }

    @Test("while the loop can still be asked to execute, its eventfd's number stays its eventfd")
    func wakeOutlivesRun() async throws {
        let loop = try SocketLoop(name: "ending-0")
        let wake = try Self.wakeDescriptor(of: loop)
        let before = try #require(Self.inode(wake))
        await withCheckedContinuation { (ended: CheckedContinuation<Void, Never>) in
            loop.start { ended.resume() }
            loop.execute { loop.quiesce() }
        }
        // `loop` is alive and `execute` callable (AnswerDelivery, a task's onLoop, the watchdog hold
        // it): the number it writes to must still be its own eventfd, not closed, not another file.
        #expect(Self.inode(wake) == before, "the eventfd's number was closed (or reused) while execute may still write to it")
        #expect(loop.hasEnded)
    }

    @Test("a job queued in the loop's last pass still runs (Store.commitInline's must run exactly once)")
    func lastPassJob() async throws {
        let socket = try TestSocket()
        let events = Events()
        let group = try SocketLoopGroup(count: 1)
        let loop = group.loops[0]
        group.start(
            listeningOn: socket.fd,
            accepted: { connection in
                connection.delegate = LastWordsDelegate(events: events, loop: loop)
            },
            failed: { _ in }, released: {})
        let client = try socket.connect()
        try client.send([1])
        #expect(try client.receive(count: 1) == [1])
        group.quiesce()
        #expect(try client.receiveAll() == [2], "the last word, then end of file")
        await group.finished()
        #expect(events.all.contains("closed"))
        #expect(events.all.contains("job ran"), "\(events.all)")
    }

    @Test("stop closes connections that are still open, without tripping exclusivity checks")
    func stopWithOpenConnections() async throws {
        let socket = try TestSocket()
        let events = Events()
        let group = try SocketLoopGroup(count: 1)
        group.start(
            listeningOn: socket.fd, accepted: { $0.delegate = EchoDelegate(events: events) },
            failed: { _ in }, released: {})
        var clients: [RawConnection] = []
        for index in 0..<4 {
            let client = try socket.connect()
            try client.send([UInt8(index)])
            #expect(try client.receive(count: 1) == [UInt8(index)])
            clients.append(client)
        }
        group.stop()
        await group.finished()
        for client in clients {
            #expect(try client.receiveAll().isEmpty)
        }
        #expect(events.all.filter { $0 == "closed" }.count == 4)
    }
}

/// Echoes; at quiesce writes one last byte and closes after it; when closed queues a job on its loop,
/// as a change made while serving queues the store's inline commit.
final class LastWordsDelegate: SocketConnectionDelegate {
    let events: Events
    let loop: SocketLoop

    init(events: Events, loop: SocketLoop) {
        self.events = events
        self.loop = loop
    }

    func received(_ bytes: ByteBuffer, on connection: SocketConnection) { EchoDelegate.echo(bytes, connection) }
    func inputClosed(on connection: SocketConnection) { connection.closeAfterWrites() }
    func writabilityChanged(on connection: SocketConnection) {}
    func deadlineReached(now: NIODeadline, on connection: SocketConnection) {}
    func quiesce(on connection: SocketConnection) {
        connection.output.writeInteger(UInt8(2))
        connection.outputAdded()
        connection.closeAfterWrites()
    }
    func closed(_ connection: SocketConnection) {
        events.add("closed")
        let events = self.events
        loop.execute { events.add("job ran") }
    }
}
