import Foundation
import KeyholeProtocol
import NIOCore

/// A plain blocking Unix socket, to send exactly the bytes a test wants, including broken ones.
///
/// Every receive has a timeout (`SO_RCVTIMEO`), so a test that waits for something that never comes
/// fails instead of hanging.
package final class RawConnection: @unchecked Sendable {
    package let fd: Int32

    package struct Failure: Error, CustomStringConvertible {
        package var description: String
        package init(description: String) { self.description = description }
    }

    package init(path: String, receiveTimeoutSeconds: Int = 15) throws {
        // Connected before it is stored: a class's init that throws once every stored property is set
        // still runs deinit, whose close would then be a second one, of a number another thread of the
        // test process may have been given meanwhile (a child's stdout pipe read nothing, once).
        let fd = try Self.socket(AF_UNIX, timeoutSeconds: receiveTimeoutSeconds)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path.utf8) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size))
            }
        }
        guard result == 0 else {
            let error = errno
            close(fd)
            throw Failure(description: "connect \(path): \(String(cString: strerror(error)))")
        }
        self.fd = fd
    }

    /// A connection to `127.0.0.1:port` (TCP), with the same timeouts.
    package init(loopbackPort port: Int, receiveTimeoutSeconds: Int = 15) throws {
        // Connected before it is stored, as above.
        let fd = try Self.socket(AF_INET, timeoutSeconds: receiveTimeoutSeconds)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = in_addr_t(UInt32(0x7F00_0001).bigEndian)
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard result == 0 else {
            let error = errno
            close(fd)
            throw Failure(description: "connect 127.0.0.1:\(port): \(String(cString: strerror(error)))")
        }
        self.fd = fd
    }

    deinit { close(fd) }

    /// A stream socket of `family` whose receives and sends give up after `timeoutSeconds`.
    private static func socket(_ family: Int32, timeoutSeconds: Int) throws -> Int32 {
        let fd = Glibc.socket(family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw Failure(description: "socket: \(errno)") }
        var timeout = timeval(tv_sec: timeoutSeconds, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        return fd
    }

    /// What one recv(2) returns, up to `limit` bytes: empty at the end of the stream (or a reset).
    package func receiveSome(limit: Int = 65_536) throws -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: limit)
        while true {
            let received = bytes.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if received >= 0 { return Array(bytes.prefix(received)) }
            if errno == EINTR { continue }
            if errno == ECONNRESET { return [] }
            throw Failure(description: "recv: \(String(cString: strerror(errno)))")
        }
    }

    package func send(_ bytes: [UInt8]) throws {
        var offset = 0
        while offset < bytes.count {
            let count = bytes[offset...].withUnsafeBytes { Glibc.send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            guard count > 0 else { throw Failure(description: "send: \(String(cString: strerror(errno)))") }
            offset += count
        }
    }

    package func send(hex: String) throws { try send(Self.bytes(hex: hex)) }

    /// Sends one frame whose body is `payload`.
    package func sendFrame(_ payload: [UInt8]) throws {
        var frame = withUnsafeBytes(of: UInt32(payload.count).bigEndian, Array.init)
        frame += payload
        try send(frame)
    }

    package func sendFrame(_ text: String) throws { try sendFrame(Array(text.utf8)) }

    /// Stops sending (half-close); the server may still answer.
    package func shutdownWrite() { shutdown(fd, Int32(SHUT_WR)) }

    /// Ends the connection both ways now (the descriptor is closed at deinit). Unlike a close, this
    /// reaches the server even while a child another test is spawning holds a copy of the descriptor
    /// (between posix_spawn's clone and its exec): a close then ends nothing until the child execs.
    package func hangUp() { shutdown(fd, Int32(SHUT_RDWR)) }

    /// Exactly `count` bytes, or `nil` on a clean end of stream before the first byte.
    private func receive(_ count: Int) throws -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: count)
        var offset = 0
        while offset < count {
            let received = bytes[offset...].withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if received == 0 {
                if offset == 0 { return nil }
                throw Failure(description: "end of stream inside a frame")
            }
            guard received > 0 else {
                if errno == EINTR { continue }
                throw Failure(description: "recv: \(String(cString: strerror(errno)))")
            }
            offset += received
        }
        return bytes
    }

    /// The next frame's body, or `nil` when the server closed the connection.
    package func readFrame() throws -> [UInt8]? {
        guard let header = try receive(4) else { return nil }
        let length = header.reduce(0) { $0 << 8 | Int($1) }
        guard length > 0 else { throw Failure(description: "zero-length response frame") }
        guard let body = try receive(length) else { throw Failure(description: "end of stream after header") }
        return body
    }

    /// The next response, parsed; fails on end of stream.
    package func readResponse() throws -> JSONValue {
        guard let body = try readFrame() else { throw Failure(description: "connection closed, expected a response") }
        return try JSONValue.parse(ByteBuffer(bytes: body))
    }

    /// Whether the server has sent bytes not read yet (or closed), found without blocking: tells a
    /// request answered early from one still waiting.
    package var hasUnreadBytes: Bool {
        var entry = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        return poll(&entry, 1, 0) > 0
    }

    /// Whether the next frame is keyholed's goodbye (a null-id `shutting_down`, PROTOCOL.md section 5),
    /// which it sends last on a connection drained at shutdown. `false` for any other frame or the end
    /// of the stream.
    package func readsGoodbye() throws -> Bool {
        guard let body = try readFrame() else { return false }
        let frame = try JSONValue.parse(ByteBuffer(bytes: body))
        return frame["id"] == .null && frame["ok"] == false && frame["error"]?["code"] == "shutting_down"
    }

    /// `true` when the server closed the connection with no further bytes.
    ///
    /// A server that closes while bytes we sent are unread makes Linux report ECONNRESET instead of a
    /// clean end of stream: that is a close too.
    package func readsEndOfStream() throws -> Bool {
        do {
            return try receive(1) == nil
        } catch let failure as Failure where failure.description.contains(String(cString: strerror(ECONNRESET))) {
            return true
        }
    }

    package static func bytes(hex: String) -> [UInt8] {
        var bytes: [UInt8] = []
        var index = hex.startIndex
        while index < hex.endIndex {
            let next = hex.index(index, offsetBy: 2)
            bytes.append(UInt8(hex[index..<next], radix: 16)!)
            index = next
        }
        return bytes
    }
}

/// Unix socket set-ups that tests need besides a client connection.
package enum UnixSocket {
    /// A socket bound to `path` (and listening when `backlog` is given); the caller owns the descriptor.
    package static func bound(to path: String, listening backlog: Int32? = nil) throws -> Int32 {
        let fd = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path.utf8) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, backlog.map({ listen(fd, $0) == 0 }) ?? true else {
            let error = errno
            close(fd)
            throw RawConnection.Failure(description: "bind/listen \(path): \(String(cString: strerror(error)))")
        }
        return fd
    }
}
