/// Who may ask what: operations fall into four groups on the main socket, and four more name what the
/// HTTP listener serves (Sources/KeyholeHTTP/HTTP.md); a peer is allowed a set of them from its
/// credentials. Default deny: an operation of no listed group counts as `admin`, a peer no rule names
/// gets nothing but `ping`.
///
/// Root and keyholed's own user always get every group (an administrator cannot lock themselves
/// out). Without `rules`, members of the socket's group get `defaultGroups`: on the main socket
/// verify, session and signin, which is what the packaged socket's mode (0660, group
/// keyhole-clients) gives web apps; on the HTTP socket authz, health and metrics. With `rules`, those
/// rules alone decide for everyone else: each rule that names the peer's uid, or a group it belongs
/// to, adds its groups.
public struct AccessPolicy: Sendable, Equatable {
    /// A group of operations, the unit of permission.
    public enum Group: String, Sendable, CaseIterable {
        /// token.verify, jwks.status.
        case verify
        /// session.*, user.get.
        case session
        /// apple.sign_in, apple.notification.
        case signin
        /// Everything else: user.update, user.delete, admin.*, jwks.refresh, apple.transfer.*,
        /// apple.pending, apple.refresh_check, stats, debug.*.
        case admin
        /// The HTTP listener's forward-auth, `/authz`.
        case authz
        /// The HTTP listener's `/healthz`.
        case health
        /// The HTTP listener's `/metrics`.
        case metrics
        /// The HTTP listener's Sign in with Apple pages: `/apple/start`, `/apple/callback`, `/logout`.
        case web
    }

    /// A set of groups, as one word: checked on every request.
    public struct Groups: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        /// A set from its bits.
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// The set holding `group` only.
        public init(_ group: Group) { self.init(rawValue: 1 << UInt8(Group.allCases.firstIndex(of: group)!)) }
        /// The set of `groups`.
        public init(_ groups: some Sequence<Group>) { self.init(rawValue: groups.reduce(0) { $0 | Groups($1).rawValue }) }
        /// Every group.
        public static let all = Groups(Group.allCases)
        /// What the main socket's group gets by default.
        public static let clients = Groups([.verify, .session, .signin])
        /// What the HTTP socket's group gets by default.
        public static let proxies = Groups([.authz, .health, .metrics])
    }

    /// One `[[access]]` rule: the peers it names get `allow`.
    public struct Rule: Sendable, Equatable {
        /// User ids named by the rule.
        public var users: Set<UInt32>
        /// Group ids: a peer whose effective or supplementary group is one of them matches.
        public var groups: Set<UInt32>
        /// What the rule allows.
        public var allow: Groups

        /// A rule.
        public init(users: Set<UInt32> = [], groups: Set<UInt32> = [], allow: Groups) {
            self.users = users
            self.groups = groups
            self.allow = allow
        }

        func matches(_ peer: PeerCredentials, overflowGroup: UInt32) -> Bool {
            users.contains(peer.uid) || groups.contains { $0 != overflowGroup && peer.isMember(of: $0) }
        }
    }

    /// The configured rules; `nil` for the default (the socket's group gets `defaultGroups`).
    public var rules: [Rule]?
    /// What the socket's group gets when there are no rules.
    public var defaultGroups: Groups = .clients
    /// The group owning the socket file, when known (set by the server once it listens).
    public var socketGroup: UInt32?
    /// keyholed's own user, which gets every group like root.
    public var serverUser: UInt32
    /// The uid and gid the kernel reports for ids that keyholed's user namespace does not map
    /// (`/proc/sys/kernel/overflowuid` and `overflowgid`, 65534 by default). Every such peer reads as
    /// the same id, so it tells nothing about who the peer is: a peer with the overflow uid is
    /// unknown (nothing but `ping`), and the overflow gid makes nobody a member of anything.
    public var overflowIDs: (user: UInt32, group: UInt32)

    /// The default policy for a server running as `serverUser`.
    public init(
        rules: [Rule]? = nil, socketGroup: UInt32? = nil, serverUser: UInt32,
        overflowIDs: (user: UInt32, group: UInt32) = PeerCredentials.overflowIDs
    ) {
        self.rules = rules
        self.socketGroup = socketGroup
        self.serverUser = serverUser
        self.overflowIDs = overflowIDs
    }

    /// Equal when every member is.
    public static func == (lhs: AccessPolicy, rhs: AccessPolicy) -> Bool {
        lhs.rules == rhs.rules && lhs.defaultGroups == rhs.defaultGroups && lhs.socketGroup == rhs.socketGroup
            && lhs.serverUser == rhs.serverUser && lhs.overflowIDs == rhs.overflowIDs
    }

    /// What `peer` may do; nothing (but `ping`) for unknown credentials, the overflow uid's included.
    public func allowed(for peer: PeerCredentials?) -> Groups {
        guard let peer, peer.uid != overflowIDs.user else { return [] }
        if peer.uid == 0 || peer.uid == serverUser { return .all }
        guard let rules else {
            if let socketGroup, socketGroup != overflowIDs.group, peer.isMember(of: socketGroup) { return defaultGroups }
            return []
        }
        var allowed: Groups = []
        for rule in rules where rule.matches(peer, overflowGroup: overflowIDs.group) { allowed.formUnion(rule.allow) }
        return allowed
    }

    /// The group of operation `op`; `nil` for `ping`, which everyone may send.
    public static func group(of op: String) -> Group? {
        switch op {
        case "ping": nil
        case "token.verify", "jwks.status": .verify
        case "user.get": .session
        case "apple.sign_in", "apple.notification", "apple.authorize", "apple.callback": .signin
        case _ where op.hasPrefix("session."): .session
        default: .admin
        }
    }
}
