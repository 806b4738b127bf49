import CKeyholeSystemd

#if canImport(Glibc)
import Glibc
#endif

/// Socket activation: the listening socket systemd opened for keyholed (`keyholed.socket`).
public enum ListenSockets {
    /// A socket passed by systemd.
    public struct Adopted: Sendable, Equatable, CustomStringConvertible {
        /// The descriptor, from 3 (SD_LISTEN_FDS_START) on.
        public var descriptor: CInt
        /// Its FileDescriptorName= ("unknown" when the unit gives none).
        public var name: String

        public var description: String { "fd:\(descriptor) (\(name))" }
    }

    /// Takes the listening Unix stream socket named `name` (or the only socket passed, when it has
    /// none of the `others` names), and those named in `others`, when systemd started this process
    /// through socket activation; nil and empty when it did not (no LISTEN_FDS for this process). The
    /// environment variables are removed, so that nothing keyholed starts sees them, and any other
    /// sockets passed are closed (systemd keeps its own copies).
    public static func take(named name: String, others: [String] = []) throws(SystemdError) -> (main: Adopted?, others: [String: Adopted]) {
        var names: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?
        let count = sd_listen_fds_with_names(1, &names)
        var passed: [Adopted] = []
        if count > 0 {
            let start = ckeyhole_sd_listen_fds_start()
            for index in 0..<Int(count) {
                let label = names?[index].map { String(cString: $0) } ?? "unknown"
                passed.append(Adopted(descriptor: start + CInt(index), name: label))
            }
        }
        if let names {
            for index in 0..<max(Int(count), 0) { free(names[index]) }
            free(names)
        }
        guard count >= 0 else {
            throw .listenSockets("systemd's LISTEN_FDS cannot be read: \(String(cString: strerror(-count)))")
        }
        guard !passed.isEmpty else { return (nil, [:]) }
        var taken: [String: Adopted] = [:]
        for socket in passed where (socket.name == name || others.contains(socket.name)) && taken[socket.name] == nil {
            taken[socket.name] = socket
        }
        if taken[name] == nil, passed.count == 1, !others.contains(passed[0].name) {
            taken[name] = passed[0]
        }
        guard let chosen = taken[name] else {
            for socket in passed { close(socket.descriptor) }
            throw .listenSockets(
                "systemd passed \(passed.count) sockets (\(passed.map(\.name).joined(separator: ", "))), none named '\(name)': set FileDescriptorName=\(name) in the socket unit")
        }
        for socket in passed where !taken.values.contains(socket) { close(socket.descriptor) }
        for socket in taken.values {
            guard sd_is_socket_unix(socket.descriptor, CInt(SOCK_STREAM.rawValue), 1, nil, 0) > 0 else {
                for socket in taken.values { close(socket.descriptor) }
                throw .listenSockets("systemd's socket \(socket) is not a listening Unix stream socket: its unit needs ListenStream=/path and Accept=no")
            }
        }
        taken[name] = nil
        return (chosen, taken)
    }
}
