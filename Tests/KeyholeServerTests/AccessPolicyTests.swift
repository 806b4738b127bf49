import Foundation
import Testing

@testable import KeyholeServer

@Suite("AccessPolicy")
struct AccessPolicyTests {
    static let web = PeerCredentials(pid: 10, uid: 33, gid: 33, groups: [33, 990])
    static let stranger = PeerCredentials(pid: 11, uid: 1000, gid: 1000, groups: [1000])

    @Test("operations fall into their groups; anything unlisted is admin; ping is in none")
    func groups() {
        #expect(AccessPolicy.group(of: "ping") == nil)
        for op in ["token.verify", "jwks.status"] { #expect(AccessPolicy.group(of: op) == .verify) }
        for op in ["session.create", "session.get", "session.revoke", "session.revoke_all", "session.list", "user.get"] {
            #expect(AccessPolicy.group(of: op) == .session)
        }
        for op in ["apple.sign_in", "apple.notification", "apple.authorize", "apple.callback"] { #expect(AccessPolicy.group(of: op) == .signin) }
        for op in ["user.update", "user.delete", "admin.snapshot", "admin.reload", "jwks.refresh", "apple.transfer.export",
            "apple.transfer.import", "apple.pending", "apple.refresh_check", "stats", "debug.echo", "no.such.op", "sessions"]
        {
            #expect(AccessPolicy.group(of: op) == .admin, "\(op)")
        }
    }

    @Test("default: root and keyholed's own user get everything, the socket's group verify, session and signin, others nothing")
    func defaultPolicy() {
        let policy = AccessPolicy(socketGroup: 990, serverUser: 994)
        #expect(policy.allowed(for: PeerCredentials(pid: 1, uid: 0, gid: 0, groups: [])) == .all)
        #expect(policy.allowed(for: PeerCredentials(pid: 1, uid: 994, gid: 994, groups: nil)) == .all)
        #expect(policy.allowed(for: Self.web) == [.init(.verify), .init(.session), .init(.signin)])
        #expect(policy.allowed(for: PeerCredentials(pid: 1, uid: 33, gid: 990, groups: [])) == .clients)
        #expect(policy.allowed(for: Self.stranger) == [])
        #expect(policy.allowed(for: nil) == [])
        // Unknown socket group: only root and keyholed's user.
        #expect(AccessPolicy(serverUser: 994).allowed(for: Self.web) == [])
        // Groups the kernel could not list grant nothing through them.
        #expect(policy.allowed(for: PeerCredentials(pid: 1, uid: 33, gid: 33, groups: nil)) == [])
    }

    @Test("rules replace the socket-group default; a peer gets the union of the rules that name it")
    func rules() {
        let rules = [
            AccessPolicy.Rule(users: [33], allow: [.init(.session), .init(.signin)]),
            AccessPolicy.Rule(groups: [4242], allow: .init(.admin)),
            AccessPolicy.Rule(groups: [990], allow: .init(.verify)),
        ]
        let policy = AccessPolicy(rules: rules, socketGroup: 990, serverUser: 994)
        #expect(policy.allowed(for: Self.web) == [.init(.verify), .init(.session), .init(.signin)])
        let operator_ = PeerCredentials(pid: 2, uid: 1000, gid: 1000, groups: [27, 4242])
        #expect(policy.allowed(for: operator_) == .init(.admin))
        #expect(policy.allowed(for: Self.stranger) == [])
        #expect(policy.allowed(for: PeerCredentials(pid: 3, uid: 0, gid: 0, groups: [])) == .all)
        // With rules, membership of the socket's group alone gives only what a rule says.
        #expect(AccessPolicy(rules: [], socketGroup: 990, serverUser: 994).allowed(for: Self.web) == [])
    }

    @Test("SO_PEERGROUPS' zero-padded answer: the ascending run; a leading 0 only when a group follows it")
    func kernelGroupList() {
        func parse(_ gids: [UInt32]) -> [UInt32] {
            PeerCredentials.supplementaryGroups(fromKernelList: gids + [UInt32](repeating: 0, count: 256 - gids.count))
        }
        #expect(parse([]) == [])
        #expect(parse([27, 100, 990]) == [27, 100, 990])
        #expect(parse([0, 4, 27]) == [0, 4, 27])
        // Group 0 alone is indistinguishable from no groups: not counted (only ever denies).
        #expect(parse([0]) == [])
        let full = (1...256).map { UInt32($0) }
        #expect(PeerCredentials.supplementaryGroups(fromKernelList: full) == full)
        #expect(MemoryLayout<PeerCredentials.UCred>.size == 12)
        #expect(MemoryLayout<PeerCredentials.GroupBuffer>.size == 4 * PeerCredentials.maxGroups)
    }
}

/// Ids a user namespace does not map read as the overflow ids: they say nothing about who a peer is.
@Suite("AccessPolicy and the overflow ids")
struct AccessPolicyOverflowTests {
    static let overflow: (user: UInt32, group: UInt32) = (65534, 65534)
    static let unmapped = PeerCredentials(pid: 12, uid: 65534, gid: 65534, groups: [65534])

    @Test("a peer with the overflow uid gets nothing, whatever the rules and its groups say")
    func overflowUser() {
        let byDefault = AccessPolicy(socketGroup: 990, serverUser: 994, overflowIDs: Self.overflow)
        #expect(byDefault.allowed(for: PeerCredentials(pid: 12, uid: 65534, gid: 990, groups: [990])) == [])
        let named = AccessPolicy(rules: [.init(users: [65534], allow: .all), .init(groups: [990], allow: .all)],
            socketGroup: 990, serverUser: 994, overflowIDs: Self.overflow)
        #expect(named.allowed(for: PeerCredentials(pid: 12, uid: 65534, gid: 990, groups: [990])) == [])
        // The same rules for a mapped peer of that group: the rules themselves do match.
        #expect(named.allowed(for: PeerCredentials(pid: 13, uid: 33, gid: 990, groups: [990])) == .all)
    }

    @Test("the overflow gid makes nobody a member: not of a rule's group, not of the socket's")
    func overflowGroup() {
        let rules = AccessPolicy(rules: [.init(groups: [65534], allow: .all)], serverUser: 994, overflowIDs: Self.overflow)
        #expect(rules.allowed(for: PeerCredentials(pid: 13, uid: 33, gid: 65534, groups: [65534])) == [])
        // A socket whose group keyholed's namespace does not map reads as owned by the overflow gid.
        let socket = AccessPolicy(socketGroup: 65534, serverUser: 994, overflowIDs: Self.overflow)
        #expect(socket.allowed(for: PeerCredentials(pid: 13, uid: 33, gid: 65534, groups: [65534])) == [])
        #expect(socket.allowed(for: Self.unmapped) == [])
    }

    @Test("the overflow ids are read from the kernel")
    func kernelOverflowIDs() throws {
        let user = try String(contentsOfFile: "/proc/sys/kernel/overflowuid", encoding: .utf8)
        let group = try String(contentsOfFile: "/proc/sys/kernel/overflowgid", encoding: .utf8)
        #expect("\(PeerCredentials.overflowIDs.user)\n" == user)
        #expect("\(PeerCredentials.overflowIDs.group)\n" == group)
    }
}
