import Foundation

/// A Unix stream socket the test binds and listens on, then hands to keyholed as systemd would:
/// it outlives each keyholed, so clients that connect between two wait in its backlog.
package final class ListeningSocket: Sendable {
    package let path: String
    /// Close-on-exec, and never 3 (the number a child gets it under).
    package let fd: Int32

    package init(path: String, backlog: Int32 = 1024) throws {
        self.path = path
        var descriptor = socket(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard descriptor >= 0 else { throw RawConnection.Failure(description: "socket: \(errno)") }
        if descriptor <= 3 {
            let moved = fcntl(descriptor, F_DUPFD_CLOEXEC, 4)
            let error = errno
            close(descriptor)
            guard moved >= 0 else { throw RawConnection.Failure(description: "fcntl F_DUPFD_CLOEXEC: \(String(cString: strerror(error)))") }
            descriptor = moved
        }
        var address = sockaddr_un()
        address.sun_family = sa_family_t(AF_UNIX)
        withUnsafeMutableBytes(of: &address.sun_path) { $0.copyBytes(from: path.utf8) }
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(descriptor, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
        }
        guard bound == 0, listen(descriptor, backlog) == 0 else {
            let error = String(cString: strerror(errno))
            close(descriptor)
            // deinit does not run (nothing of it is kept): the file a bind made goes here.
            if bound == 0 { unlink(path) }
            throw RawConnection.Failure(description: "bind/listen \(path): \(error)")
        }
        // Stored last: deinit would close it a second time (see RawConnection.init).
        fd = descriptor
    }

    deinit {
        close(fd)
        unlink(path)
    }
}
