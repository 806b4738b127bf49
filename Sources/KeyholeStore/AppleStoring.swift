import KeyholeProtocol

/// What Sign in with Apple keeps besides sessions, whatever keeps it: the local `Store` or
/// PostgreSQL (`KeyholePostgres`). Conditional changes of a user's record (notifications, refresh
/// checks, team transfers), a deletion that queues work in the outbox in the same change, a walk
/// through one issuer's users, and the outbox as several hosts share it: an entry is worked on by
/// one host at a time (a lease), and done at least once. Every method answers once its change is
/// durable. The closures a method takes run inside the change (under the local store's lock, or in
/// the database transaction holding the user's row), so nothing can slip in between what they read
/// and what is written; they may run on any thread and must not block.
public protocol AppleStoring: SessionStoring {
    /// Changes `principal`'s record with `update` when they have one (never creating it); `update`
    /// returns whether the change applies (when not, nothing is written). With `revokeSessions`, an
    /// applied change also removes every session of theirs. The record after (`nil`: there was
    /// none), whether it applied, and how many live sessions went.
    func modifyUser(
        _ principal: Principal, now: Int64, revokeSessions: Bool, _ update: @escaping @Sendable (inout User) -> Bool
    ) async throws(StoreError) -> (user: User, applied: Bool, sessions: Int)?

    /// A sign-in: `principal`'s record made if missing and changed by `update`, and a new session of
    /// theirs (which stamps the record's last login), in one change: both durable, or neither. The
    /// record after, whether it was made, and the session with its token.
    func signIn(
        _ principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?, _ update: @escaping @Sendable (inout User) -> Void
    ) async throws(StoreError) -> (user: User, created: Bool, token: String, session: Session)

    /// Moves `from`'s record and sessions to `to` (a team transfer), a record `to` already has
    /// winning member by member, then `adjust` applied. The record after (`nil` when `from` had
    /// neither record nor live session) and how many sessions moved.
    func moveUser(
        _ from: Principal, to: Principal, now: Int64, adjust: @escaping @Sendable (inout User) -> Void
    ) async throws(StoreError) -> (user: User?, sessions: Int)?

    /// Deletes `principal`'s record and sessions when `condition` accepts the record as it is (`nil`:
    /// none), adding in the same change the outbox entry `work` gives for the record. Whether
    /// anything went, how many live sessions, and the entry added.
    func deleteUser(
        _ principal: Principal, now: Int64, when condition: @escaping @Sendable (User?) -> Bool,
        outbox work: @escaping @Sendable (User) -> Store.OutboxWork?
    ) async throws(StoreError) -> (deleted: Bool, sessions: Int, outbox: OutboxEntry?)

    /// Up to about `limit` users of `issuer` from `cursor` on (`nil`: the start), and where to go on
    /// (`nil` after the last): a background walk through every user, a slice at a time.
    func users(of issuer: String, from cursor: UserCursor?, limit: Int) async throws(StoreError) -> (users: [User], next: UserCursor?)

    /// The outbox entries of `kind`, oldest first.
    func outbox(kind: String) async throws(StoreError) -> [OutboxEntry]

    /// How many entries of `kind` the outbox holds, when that is known without waiting (the local
    /// store); `nil` otherwise.
    func outboxCountNow(kind: String) -> Int?

    /// Takes entry `id` for this host for `lease` seconds, so that no other host works on it
    /// meanwhile.
    func claimOutbox(_ id: UInt64, lease: Int64, now: Int64) async throws(StoreError) -> OutboxClaim

    /// Entry `id`'s work is done: it goes, if this host still holds it. Whether it went.
    func completeOutbox(_ id: UInt64) async throws(StoreError) -> Bool

    /// Entry `id`'s work failed here: any host may try it again from `retryAt` on.
    func releaseOutbox(_ id: UInt64, retryAt: Int64, now: Int64) async throws(StoreError)
}

/// Where a walk through users (`AppleStoring.users(of:from:limit:)`) goes on: opaque to callers.
public enum UserCursor: Sendable, Equatable {
    /// The local store's next principal slot.
    case slot(Int)
    /// PostgreSQL: past this sub's bytes.
    case after(sub: [UInt8])
}

/// What claiming an outbox entry found.
public enum OutboxClaim: Sendable, Equatable {
    /// This host holds it now.
    case claimed
    /// It is done (no longer in the outbox).
    case gone
    /// Another host holds it, or a failure put it off: not before `until` (seconds since 1970).
    case busy(until: Int64)
}
