import KeyholeJOSE
import KeyholeProtocol
import KeyholeStore

/// What a user's record keeps of their grant at Apple, in `ext.apple` (WALRecordTypes.md, "The user
/// record"): the refresh token sealed with the store key, the client it was issued to, and when it was
/// last checked. The token is opened only to be sent to Apple.
package struct AppleGrant: Sendable, Equatable {
    /// The refresh token sealed (AES-256-GCM) with the user's issuer and sub as associated data.
    var sealedToken: [UInt8]
    /// The bundle ID or Services ID the token was issued to: Apple takes it back only from that client.
    var clientID: String
    /// When the token was last found valid (issued, or checked at Apple).
    var checkedAt: Int64

    /// The grant in `user`'s record, if there is one that can be read.
    init?(_ user: User) {
        guard case .object(let ext)? = user.fields["ext"], case .object(let apple)? = ext["apple"],
            case .string(let token)? = apple["refresh_token"], let sealed = Base64URL.decode(token),
            case .string(let clientID)? = apple["client_id"]
        else { return nil }
        self.init(sealedToken: sealed, clientID: clientID, checkedAt: apple["refresh_checked_at"]?.intValue ?? 0)
    }

    /// A grant of `sealedToken` issued to `clientID`, last found valid at `checkedAt`.
    package init(sealedToken: [UInt8], clientID: String, checkedAt: Int64) {
        self.sealedToken = sealedToken
        self.clientID = clientID
        self.checkedAt = checkedAt
    }

    /// Stores the grant in `user`'s record, keeping what else `ext.apple` holds. A new grant is new
    /// consent: a `consent_revoked_at` from before goes.
    package func store(in user: inout User) {
        user.fields["consent_revoked_at"] = nil
        var ext = user.fields["ext"]?.objectValue ?? [:]
        var apple = ext["apple"]?.objectValue ?? [:]
        apple["refresh_token"] = .string(Base64URL.encode(sealedToken))
        apple["client_id"] = .string(clientID)
        apple["refresh_checked_at"] = .int(checkedAt)
        apple["refresh_claimed_at"] = nil
        ext["apple"] = .object(apple)
        user.fields["ext"] = .object(ext)
    }

    /// Drops the grant from `user`'s record (consent withdrawn), noting when in `consent_revoked_at`,
    /// which `user.get` and `session.get` show: with `on_revoked = "flag"` the application acts on it.
    static func remove(from user: inout User, revokedAt time: Int64) {
        var ext = user.fields["ext"]?.objectValue ?? [:]
        var apple = ext["apple"]?.objectValue ?? [:]
        apple["refresh_token"] = nil
        apple["refresh_checked_at"] = nil
        apple["refresh_claimed_at"] = nil
        ext["apple"] = .object(apple)
        user.fields["ext"] = .object(ext)
        user.fields["consent_revoked_at"] = .int(time)
    }

    /// Drops the grant from `user`'s record without a trace (a team transfer: the token was sealed
    /// for the old sub and issued to the sending team's client; neither is of use any more).
    static func discard(from user: inout User) {
        guard var ext = user.fields["ext"]?.objectValue, var apple = ext["apple"]?.objectValue else { return }
        for member in ["refresh_token", "client_id", "refresh_checked_at", "refresh_claimed_at"] { apple[member] = nil }
        ext["apple"] = .object(apple)
        user.fields["ext"] = .object(ext)
    }

    /// When a host took the check of `user`'s grant (`ext.apple.refresh_claimed_at`): with several
    /// hosts, the one whose claim is written checks, and the others skip it (until the claim is
    /// old: a host that died checking).
    static func checkClaimedAt(_ user: User) -> Int64? {
        user.fields["ext"]?.objectValue?["apple"]?.objectValue?["refresh_claimed_at"]?.intValue
    }

    /// Notes in `user`'s record that a host checks their grant from `time`; storing the grant
    /// after the check (or dropping it) clears it.
    static func claimCheck(in user: inout User, at time: Int64) {
        var ext = user.fields["ext"]?.objectValue ?? [:]
        var apple = ext["apple"]?.objectValue ?? [:]
        apple["refresh_claimed_at"] = .int(time)
        ext["apple"] = .object(apple)
        user.fields["ext"] = .object(ext)
    }

    /// The associated data a refresh token is sealed with: it opens only as this user's.
    static func associatedData(_ principal: Principal) -> [UInt8] {
        Array("keyhole.apple.refresh_token\u{0}\(principal.issuer)\u{0}\(principal.sub)".utf8)
    }

    /// Seals `refreshToken` for `principal`.
    static func seal(_ refreshToken: String, for principal: Principal, with key: SealingKey) -> [UInt8]? {
        key.seal(Array(refreshToken.utf8), associatedData: associatedData(principal))
    }

    /// The refresh token in clear, for one request to Apple; `nil` when it does not open (another
    /// store key, or a record moved to another user).
    func open(for principal: Principal, with key: SealingKey) -> String? {
        guard let bytes = key.open(sealedToken, associatedData: Self.associatedData(principal)) else { return nil }
        return String(validating: bytes, as: UTF8.self)
    }
}
