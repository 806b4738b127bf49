import KeyholeIssuers
import KeyholeServer

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// Whether keyholed's user namespace lets it tell its peers apart.
///
/// The kernel reports a peer's uid and gids (SO_PEERCRED, SO_PEERGROUPS) as seen from keyholed's
/// user namespace: any id the namespace does not map reads as the overflow id (65534). Under
/// systemd's `PrivateUsers=yes`, which maps only root and the service's own user, every web app is
/// then uid 65534: `[[access]]` rules naming users or groups never match, one per-uid limit is
/// shared by all, and audit lines cannot say who asked. keyholed refuses to start in a namespace
/// that does not map every id to itself unless `[server] allow_unmapped_peers = true`; peers
/// outside the map are then unknown and get only `ping` (AccessPolicy).
enum UserNamespace {
    /// The largest count a map line can have: ids 0 to 2^32 - 2 (2^32 - 1 is "no id").
    static let wholeRange: UInt64 = 4_294_967_295

    /// Whether `map` (the text of /proc/self/uid_map or gid_map: lines of `inside outside count`)
    /// maps every id from 0 to 2^32 - 2 to itself. A line mapping ids to others, or ids no line
    /// maps, make it `false`; so does text that does not read as a map.
    static func mapsEveryIDToItself(_ map: String) -> Bool {
        var ranges: [(start: UInt64, end: UInt64)] = []
        for line in map.split(whereSeparator: { $0 == "\n" }) {
            let fields = line.split(whereSeparator: { $0 == " " || $0 == "\t" })
            guard fields.count == 3, let inside = UInt64(fields[0]), let outside = UInt64(fields[1]),
                let count = UInt64(fields[2]), count > 0, inside == outside
            else { return false }
            ranges.append((inside, inside + count))
        }
        var covered: UInt64 = 0
        for range in ranges.sorted(by: { $0.start < $1.start }) {
            guard range.start <= covered else { return false }
            covered = max(covered, range.end)
        }
        return covered >= wholeRange
    }

    /// Why keyholed's namespace does not let it tell peers apart, or `nil` when it does.
    static func problem() -> String? {
        for (kind, path) in [("uid", "/proc/self/uid_map"), ("gid", "/proc/self/gid_map")] {
            guard let bytes = try? LocalFile.contents(of: path, maximumBytes: 1 << 16) else {
                return "cannot read \(path), so cannot tell whether peers' \(kind)s are their own"
            }
            guard mapsEveryIDToItself(String(decoding: bytes, as: UTF8.self)) else {
                let overflow = kind == "uid" ? PeerCredentials.overflowIDs.user : PeerCredentials.overflowIDs.group
                return "keyholed runs in a user namespace whose \(kind) map (\(path)) does not map every \(kind) to itself "
                    + "(PrivateUsers= in its unit?): every peer outside the map reads as \(kind) \(overflow), so [[access]] rules "
                    + "and per-uid limits cannot tell web apps apart. Run it without the namespace, or set "
                    + "[server] allow_unmapped_peers = true to accept that such peers get nothing but ping"
            }
        }
        return nil
    }
}
