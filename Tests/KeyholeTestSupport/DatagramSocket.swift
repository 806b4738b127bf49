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
        // The kernel stamps each message as it arrives: when it came is then the sender's doing,
        // not how late this test's thread got to reading it on a loaded machine.
        var on: Int32 = 1
        guard setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, socklen_t(MemoryLayout<Int32>.size)) == 0 else {
            let error = String(cString: strerror(errno))
            close(fd)
            throw RawConnection.Failure(description: "SO_TIMESTAMPNS: \(error)")
        }
        self.fd = fd
    }

    deinit {
        close(fd)
        unlink(path)
    }

    /// The next message and when it came (as the kernel stamped its arrival), or nil when none
    /// comes within `seconds`.
    package func receive(seconds: Double = 30) -> (text: String, at: ContinuousClock.Instant)? {
        var timeout = timeval(tv_sec: Int(seconds), tv_usec: Int((seconds - seconds.rounded(.down)) * 1_000_000))
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        var buffer = [UInt8](repeating: 0, count: 4096)
        // Room for one control message holding a timespec (cmsghdr, then the data, aligned).
        var control = [UInt8](repeating: 0, count: 64)
        while true {
            var controlLength = 0
            var flags: Int32 = 0
            let count = buffer.withUnsafeMutableBytes { data in
                control.withUnsafeMutableBytes { control in
                    var vector = iovec(iov_base: data.baseAddress, iov_len: data.count)
                    return withUnsafeMutablePointer(to: &vector) { vector in
                        var message = msghdr()
                        message.msg_iov = vector
                        message.msg_iovlen = 1
                        message.msg_control = control.baseAddress
                        message.msg_controllen = control.count
                        let count = recvmsg(fd, &message, 0)
                        controlLength = Int(message.msg_controllen)
                        flags = message.msg_flags
                        return count
                    }
                }
            }
            if count < 0 && errno == EINTR { continue }
            guard count >= 0 else { return nil }
            // A control message cut short (MSG_CTRUNC) or missing has no stamp to read: then the
            // message is dated now, as before stamps were asked for.
            let stamped = flags & Int32(MSG_CTRUNC) == 0 ? Array(control[..<min(controlLength, control.count)]) : []
            return (String(decoding: buffer[..<count], as: UTF8.self), Self.arrival(stamped))
        }
    }

    /// The arrival the kernel stamped (SCM_TIMESTAMPNS, the real-time clock) on the continuous clock:
    /// now, less how long ago that was.
    private static func arrival(_ control: [UInt8]) -> ContinuousClock.Instant {
        let now = ContinuousClock.now
        let header = MemoryLayout<cmsghdr>.size
        guard control.count >= header + MemoryLayout<timespec>.size else { return now }
        let first = control.withUnsafeBytes { $0.loadUnaligned(as: cmsghdr.self) }
        guard first.cmsg_level == SOL_SOCKET, first.cmsg_type == SO_TIMESTAMPNS else { return now }
        let stamp = control.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: header, as: timespec.self) }
        var real = timespec()
        clock_gettime(CLOCK_REALTIME, &real)
        let ago = Duration.seconds(real.tv_sec - stamp.tv_sec) + .nanoseconds(real.tv_nsec - stamp.tv_nsec)
        return ago > .zero ? now - ago : now
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
