import KeyholeIssuers
import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Who is at the other end of a connection, as the kernel says: the process's pid, effective uid and
/// gid when it connected (SO_PEERCRED), and its supplementary groups (SO_PEERGROUPS). Read once, when
/// the connection is accepted; a client cannot change them afterwards.
public struct PeerCredentials: Sendable, Equatable {
    /// The peer's process id when it connected (it may have exited since: for logs only).
    public var pid: Int32
    /// Its effective user id.
    public var uid: UInt32
    /// Its effective group id.
    public var gid: UInt32
    /// Its supplementary groups, ascending; `nil` when the kernel could not list them (more than
    /// `maxGroups`), and then no group rule matches through them.
    public var groups: [UInt32]?

    /// Supplementary groups read at most; a peer in more has `groups == nil`.
    public static let maxGroups = 256

    /// Credentials as given (tests; the server reads them from the kernel).
    public init(pid: Int32, uid: UInt32, gid: UInt32, groups: [UInt32]?) {
        self.pid = pid
        self.uid = uid
        self.gid = gid
        self.groups = groups
    }

    /// Whether the peer belongs to `group`, as its effective or a supplementary group.
    public func isMember(of group: UInt32) -> Bool {
        gid == group || (groups?.contains(group) ?? false)
    }
}

extension PeerCredentials {
    /// The ids the kernel reports for a uid or gid that the reader's user namespace does not map:
    /// `/proc/sys/kernel/overflowuid` and `overflowgid`, 65534 when they cannot be read.
    public static let overflowIDs: (user: UInt32, group: UInt32) = (
        overflowID("/proc/sys/kernel/overflowuid"), overflowID("/proc/sys/kernel/overflowgid")
    )

    private static func overflowID(_ path: String) -> UInt32 {
        guard let bytes = try? LocalFile.contents(of: path, maximumBytes: 32) else { return 65534 }
        return UInt32(String(decoding: bytes.prefix { (0x30...0x39).contains($0) }, as: UTF8.self)) ?? 65534
    }

    /// The layout of `struct ucred` (<sys/socket.h>), which Glibc's module exposes only under
    /// _GNU_SOURCE: three 32-bit fields, 12 bytes, the same on every Linux architecture.
    struct UCred: Sendable {
        var pid: Int32 = 0
        var uid: UInt32 = 0
        var gid: UInt32 = 0
    }

    /// Room for SO_PEERGROUPS' answer.
    struct GroupBuffer: Sendable {
        var gids = InlineArray<256, UInt32>(repeating: 0)
    }

    /// SO_PEERCRED and SO_PEERGROUPS (Linux 4.13), from <asm-generic/socket.h>.
    static let peerCredentialsOption: SocketOptionName = 17
    static let peerGroupsOption: SocketOptionName = 59

    /// Reads the credentials of `channel`'s peer; `nil` when the kernel does not give them (then the
    /// connection is treated as a stranger's).
    package static func read(from channel: any Channel) -> EventLoopFuture<PeerCredentials?> {
        guard let provider = channel as? any SocketOptionProvider else {
            return channel.eventLoop.makeSucceededFuture(nil)
        }
        let level = SocketOptionLevel(SOL_SOCKET)
        let credentials: EventLoopFuture<UCred> = provider.unsafeGetSocketOption(level: level, name: peerCredentialsOption)
        let groups: EventLoopFuture<GroupBuffer> = provider.unsafeGetSocketOption(level: level, name: peerGroupsOption)
        return credentials.and(groups.map(Optional.some).recover { _ in nil }).map { credentials, buffer in
            PeerCredentials(
                pid: credentials.pid, uid: credentials.uid, gid: credentials.gid,
                groups: buffer.map { buffer in supplementaryGroups(fromKernelList: buffer.gids.indices.map { buffer.gids[$0] }) })
        }.recover { _ in nil }
    }

    /// Reads the credentials of the peer of socket `fd` (a connection keyholed's own loop accepted);
    /// `nil` when the kernel does not give them (then the connection is treated as a stranger's).
    static func read(fromSocket fd: CInt) -> PeerCredentials? {
        var credentials = UCred()
        var length = socklen_t(MemoryLayout<UCred>.size)
        guard getsockopt(fd, SOL_SOCKET, peerCredentialsOption, &credentials, &length) == 0,
            length == socklen_t(MemoryLayout<UCred>.size)
        else { return nil }
        var buffer = GroupBuffer()
        var groupsLength = socklen_t(MemoryLayout<GroupBuffer>.size)
        // Unlike NIO's option call, getsockopt says how many groups it wrote; more than the buffer
        // holds (ERANGE), or an older kernel: no list, so that no group rule matches through one.
        let groups: [UInt32]? = withUnsafeMutableBytes(of: &buffer) { raw in
            guard getsockopt(fd, SOL_SOCKET, peerGroupsOption, raw.baseAddress, &groupsLength) == 0 else { return nil }
            let count = Int(groupsLength) / MemoryLayout<UInt32>.size
            return Array(raw.bindMemory(to: UInt32.self).prefix(count)).sorted()
        }
        return PeerCredentials(pid: credentials.pid, uid: credentials.uid, gid: credentials.gid, groups: groups)
    }

    /// The groups in SO_PEERGROUPS' answer. The kernel keeps a process's groups sorted ascending and
    /// writes only as many as there are; the rest of the buffer stays zero (NIO zeroes it and does not
    /// say how much was written). So the list is the strictly ascending run from the start, and a 0
    /// counts only when a larger group follows it: membership of group 0 as the only supplementary
    /// group is not recognised (it looks like an empty list), which can only deny, never grant.
    static func supplementaryGroups(fromKernelList list: [UInt32]) -> [UInt32] {
        var groups: [UInt32] = []
        for (index, gid) in list.enumerated() {
            if let last = groups.last {
                guard gid > last else { break }
            } else if gid == 0 {
                // A leading 0 is group 0 only if a member follows it.
                guard index + 1 < list.count, list[index + 1] > 0 else { break }
            }
            groups.append(gid)
        }
        return groups
    }
}
