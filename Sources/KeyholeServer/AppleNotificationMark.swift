import KeyholeProtocol
import KeyholeStore

/// The last notification applied to a user, per kind of event, kept in the user's record
/// (`ext.apple.notified.<family>`: `{"iat", "jti"}`), so that a notification Apple delivers again
/// after keyholed restarted (the `jti`s seen live in memory only) is not applied a second time, and
/// one older than what was applied is not applied over it.
///
/// Events of one family act on the same thing (`email-disabled` and `email-enabled` on
/// `email_enabled`): ordered by their `iat`, and within one second told apart by their `jti`.
struct AppleNotificationMark: Sendable, Equatable {
    /// When the applied notification was issued.
    var issuedAt: Int64
    /// Its `jti`.
    var jti: String

    /// What a notification is, set against the mark of its family in a user's record.
    enum Standing: Equatable {
        /// Newer than anything applied: apply it.
        case new
        /// The very notification applied before.
        case duplicate
        /// Issued before the one applied, or before the user's record was made: a notification about
        /// an earlier state, which must not undo what came since.
        case stale
    }

    /// The family an event type belongs to; `nil` for types keyholed does not act on.
    static func family(of type: String) -> String? {
        switch type {
        case "consent-revoked": "consent"
        case "email-disabled", "email-enabled": "email"
        case "account-delete", "account-deleted": "account"
        default: nil
        }
    }

    /// The mark of `family` in `user`'s record, if there is one that can be read.
    init?(_ user: User, family: String) {
        guard case .object(let ext)? = user.fields["ext"], case .object(let apple)? = ext["apple"],
            case .object(let notified)? = apple["notified"], case .object(let mark)? = notified[family],
            let issuedAt = mark["iat"]?.intValue, case .string(let jti)? = mark["jti"]
        else { return nil }
        self.init(issuedAt: issuedAt, jti: jti)
    }

    init(issuedAt: Int64, jti: String) {
        self.issuedAt = issuedAt
        self.jti = jti
    }

    /// Where a notification of `family` issued at `issuedAt` with `jti` stands for `user`.
    static func standing(of jti: String, issuedAt: Int64, family: String, for user: User) -> Standing {
        // A record made after the notification was issued is a later account (signed up again):
        // the notification is about the one before.
        if issuedAt < user.createdAt { return .stale }
        guard let mark = AppleNotificationMark(user, family: family) else { return .new }
        if ExactString.equal(mark.jti, jti) { return .duplicate }
        return issuedAt < mark.issuedAt ? .stale : .new
    }

    /// Records this mark for `family` in `user`'s record, keeping what else `ext.apple` holds.
    func store(in user: inout User, family: String) {
        var ext = user.fields["ext"]?.objectValue ?? [:]
        var apple = ext["apple"]?.objectValue ?? [:]
        var notified = apple["notified"]?.objectValue ?? [:]
        notified[family] = .object(["iat": .int(issuedAt), "jti": .string(jti)])
        apple["notified"] = .object(notified)
        ext["apple"] = .object(apple)
        user.fields["ext"] = .object(ext)
    }
}
