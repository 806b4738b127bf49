import Synchronization

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// The server's access policy, replaceable by a reload: a connection keeps the groups its peer may
/// use and the version they were worked out for, and works them out again when the version moved,
/// so a tightened policy applies to open connections from their next request on.
final class AccessControl: Sendable {
    private let policy: Mutex<AccessPolicy>
    private let version = Atomic<UInt64>(0)

    init(_ policy: AccessPolicy) {
        self.policy = Mutex(policy)
    }

    /// The policy's version: changes whenever it is replaced.
    var currentVersion: UInt64 { version.load(ordering: .acquiring) }

    /// What `peer` may do under the policy now, and the version that answer is for.
    func allowed(for peer: PeerCredentials?) -> (groups: AccessPolicy.Groups, version: UInt64) {
        policy.withLock { policy in (policy.allowed(for: peer), version.load(ordering: .relaxed)) }
    }

    /// The policy now.
    var current: AccessPolicy { policy.withLock { $0 } }

    /// Changes the policy with `change`, and the version.
    func update(_ change: (inout AccessPolicy) -> Void) {
        policy.withLock { policy in
            change(&policy)
            version.add(1, ordering: .releasing)
        }
    }

    /// The group owning the socket file `descriptor` listens on, if it is bound to a path.
    static func socketGroup(of descriptor: CInt) -> UInt32? {
        var address = sockaddr_un()
        var length = socklen_t(MemoryLayout<sockaddr_un>.size)
        let named = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(descriptor, $0, &length) }
        }
        guard named == 0, address.sun_family == sa_family_t(AF_UNIX) else { return nil }
        let path = withUnsafeBytes(of: address.sun_path) { bytes in
            String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
        }
        guard path.hasPrefix("/") else { return nil }
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return UInt32(info.st_gid)
    }
}
