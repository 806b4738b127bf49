import KeyholeServer

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension DaemonConfiguration {
    static let accessKeys: Set<String> = ["users", "groups", "allow"]

    /// The `[[access]]` rules, `nil` when there are none (the default policy). User and group names
    /// are looked up now, so that a name this host does not know stops the start (or the reload).
    static func accessRules(_ file: ConfigFile) throws(ConfigError) -> [AccessPolicy.Rule]? {
        let sections = try file.arraySections("access", keys: accessKeys)
        guard !sections.isEmpty else { return nil }
        var rules: [AccessPolicy.Rule] = []
        for section in sections {
            let overflow = PeerCredentials.overflowIDs
            let users = try ids(section, "users", kind: "user", overflow: overflow.user, lookup: userID(named:))
            let groups = try ids(section, "groups", kind: "group", overflow: overflow.group, lookup: groupID(named:))
            guard !users.isEmpty || !groups.isEmpty else {
                throw section.error("users", "a rule names users, groups or both")
            }
            guard let names = try section.stringArray("allow"), !names.isEmpty else {
                throw section.error("allow", "is required: the operation groups the rule allows (verify, session, signin, admin; authz, health, metrics on the HTTP listener)")
            }
            var allow: AccessPolicy.Groups = []
            for name in names {
                guard let group = AccessPolicy.Group(rawValue: name) else {
                    throw section.error("allow", "'\(name)' is not an operation group: verify, session, signin, admin, authz, health or metrics")
                }
                allow.insert(AccessPolicy.Groups(group))
            }
            rules.append(AccessPolicy.Rule(users: users, groups: groups, allow: allow))
        }
        return rules
    }

    /// The ids of an array of names (strings) and numbers. The overflow id is refused: every user or
    /// group a user namespace does not map reads as it, so a rule for it would match strangers.
    private static func ids(
        _ section: ConfigFile.Section, _ key: String, kind: String, overflow: UInt32, lookup: (String) -> UInt32?
    ) throws(ConfigError) -> Set<UInt32> {
        guard let value = section.table[key] else { return [] }
        guard let array = value.array else { throw section.error(key, "must be an array of \(kind) names or numbers") }
        var ids: Set<UInt32> = []
        for element in array {
            if let number = element.int {
                // 2^32 - 1 is (uid_t)-1, "no user" to the kernel.
                guard (0..<Int(UInt32.max)).contains(number) else {
                    throw section.error(key, "\(number) is not a \(kind) id")
                }
                ids.insert(UInt32(number))
            } else if let name = element.string {
                guard let id = lookup(name) else { throw section.error(key, "no \(kind) named '\(name)' on this host") }
                ids.insert(id)
            } else {
                throw section.error(key, "must be an array of \(kind) names or numbers")
            }
        }
        if ids.contains(overflow) {
            throw section.error(key, "names \(kind) id \(overflow), the overflow id that every \(kind) outside keyholed's user namespace reads as: a rule for it would match strangers")
        }
        return ids
    }

    static func userID(named name: String) -> UInt32? {
        var entry = passwd()
        var found: UnsafeMutablePointer<passwd>?
        var buffer = [CChar](repeating: 0, count: 16 << 10)
        guard getpwnam_r(name, &entry, &buffer, buffer.count, &found) == 0, found != nil else { return nil }
        return UInt32(entry.pw_uid)
    }

    static func groupID(named name: String) -> UInt32? {
        var entry = group()
        var found: UnsafeMutablePointer<group>?
        var buffer = [CChar](repeating: 0, count: 64 << 10)
        guard getgrnam_r(name, &entry, &buffer, buffer.count, &found) == 0, found != nil else { return nil }
        return UInt32(entry.gr_gid)
    }
}
