import Synchronization

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
}
