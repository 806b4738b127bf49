import Foundation

/// systemd's side of a datagram protocol for a test: sd_notify's socket (NOTIFY_SOCKET), the
/// journal's (/run/systemd/journal/socket); each message received with the time it came.
package final class DatagramSocket: @unchecked Sendable {
    package let path: String
    private let fd: Int32

    /// Binds a datagram socket at `path`.
    package init(path: String) throws {
        self.path = path
        // Bound before it is stored: deinit would close it a second time (see RawConnection.init).
        let fd = socket(AF_UNIX, Int32(SOCK_DGRAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw RawConnection.Failure(description: "socket: \(errno)") }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path.utf8) }
        let result = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard result == 0 else {
            let error = String(cString: strerror(errno))
            close(fd)
            throw RawConnection.Failure(description: "bind \(path): \(error)")
        }
        self.fd = fd
    }

    deinit {
        close(fd)
        unlink(path)
    }

    /// The next message and when it came, or nil when none comes within `seconds`.
    package func receive(seconds: Double = 30) -> (text: String, at: ContinuousClock.Instant)? {
        var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - seconds.rounded(.down)) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return nil }
            return (String(decoding: buffer[..<count], as: UTF8.self), .now)
        }
    }

    /// Messages until one contains `text` (that one last); nil when it never comes.
    package func receive(until text: String, seconds: Double = 30) -> [String]? {
        var messages: [String] = []
        let deadline = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
        while ContinuousClock.now < deadline {
            let left = deadline - .now
            guard let message = receive(seconds: max(0.001, Double(left.components.seconds) + Double(left.components.attoseconds) / 1e18)) else {
                return nil
            }
            messages.append(message.text)
            if message.text.contains(text) { return messages }
        }
        return nil
    }
}
