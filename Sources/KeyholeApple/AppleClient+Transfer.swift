import KeyholeJOSE
import KeyholeProtocol
import NIOCore
import Synchronization

extension AppleClient {
    /// What the receiving team learns of a transferred user.
    public struct TransferredUser: Sendable, Equatable {
        /// Their sub in the receiving team.
        public var sub: String
        /// Their email, and whether it is a private relay address, when Apple says.
        public var email: String?
        public var isPrivateEmail: Bool?
    }

    /// The sending team's step of a team transfer: the transfer identifier of `sub` for the team
    /// `target` (`/auth/usermigrationinfo` with `sub` and `target`).
    public func transferSub(for sub: String, target: String, clientID: String) async throws(AppleError) -> String {
        let answer = try await migrationInfo(["sub": sub, "target": target], clientID: clientID)
        guard case .string(let transferSub)? = answer["transfer_sub"], Self.isIdentifier(transferSub) else {
            throw .unavailable("Apple's usermigrationinfo answered without a usable transfer_sub", retryAfterMs: retryAfterMs(nil))
        }
        return transferSub
    }

    /// The receiving team's step: the user a transfer identifier stands for, once the apps are
    /// transferred (`/auth/usermigrationinfo` with `transfer_sub`).
    public func transferredUser(_ transferSub: String, clientID: String) async throws(AppleError) -> TransferredUser {
        let answer = try await migrationInfo(["transfer_sub": transferSub], clientID: clientID)
        guard case .string(let sub)? = answer["sub"], Self.isIdentifier(sub) else {
            throw .unavailable("Apple's usermigrationinfo answered without a usable sub", retryAfterMs: retryAfterMs(nil))
        }
        var user = TransferredUser(sub: sub)
        if case .string(let email)? = answer["email"], !email.isEmpty, email.utf8.count <= 320 { user.email = email }
        user.isPrivateEmail = ClaimsProfile.appleBoolean(answer["is_private_email"])
        return user
    }

    /// Apple's user identifiers are printable ASCII: anything else (whitespace, control characters,
    /// an empty or huge string) is not stored as a key nor handed to the files of a transfer.
    static func isIdentifier(_ value: String) -> Bool {
        (1...255).contains(value.utf8.count) && value.utf8.allSatisfy { (0x21...0x7E).contains($0) }
    }

    private func migrationInfo(_ fields: KeyValuePairs<String, String>, clientID: String) async throws(AppleError) -> [String: JSONValue] {
        let token = try await migrationToken(clientID: clientID)
        var form = fields.map { ($0.key, $0.value) }
        form += [("client_id", clientID), ("client_secret", try secret(clientID))]
        let answer = try await post("/auth/usermigrationinfo", form: form, bearer: token)
        guard answer.status == .ok else {
            let error = refusal(answer, clientID: clientID, grant: "user migration")
            // A refused access token (expired early, revoked) is not reused; a refused item (an unknown
            // sub, a bad target) says nothing about the token, which is kept.
            if answer.status == .unauthorized || error.appleError == "invalid_client" { migrationTokens.forget(clientID) }
            throw error
        }
        guard case .object(let members)? = try? JSONValue.parse(answer.body) else {
            throw .unavailable("Apple's usermigrationinfo answered HTTP 200 without a JSON object", retryAfterMs: retryAfterMs(nil))
        }
        return members
    }

    /// An access token of scope user.migration for `clientID` (grant_type client_credentials),
    /// reused while it lives.
    func migrationToken(clientID: String) async throws(AppleError) -> String {
        let now = ContinuousClock.now
        if let token = migrationTokens.token(for: clientID, at: now) { return token }
        let form = [
            ("client_id", clientID), ("client_secret", try secret(clientID)), ("grant_type", "client_credentials"),
            ("scope", "user.migration"),
        ]
        let response = try await tokenRequest(form, clientID: clientID, grant: "user migration token")
        guard let token = response.accessToken else {
            throw .unavailable("Apple's token endpoint answered client_credentials without an access_token", retryAfterMs: retryAfterMs(nil))
        }
        let lifetime = min(max(response.expiresIn ?? 3600, 0), 86_400)
        migrationTokens.keep(token, for: clientID, until: now + .seconds(max(lifetime - 60, 0)))
        return token
    }
}

/// Access tokens for user migration by client id: held in memory only, never logged.
final class MigrationTokens: Sendable {
    private let tokens = Mutex<[String: (token: String, until: ContinuousClock.Instant)]>([:])

    func token(for clientID: String, at now: ContinuousClock.Instant) -> String? {
        tokens.withLock { tokens in tokens[clientID].flatMap { $0.until > now ? $0.token : nil } }
    }

    func keep(_ token: String, for clientID: String, until: ContinuousClock.Instant) {
        tokens.withLock { $0[clientID] = (token, until) }
    }

    func forget(_ clientID: String) {
        _ = tokens.withLock { $0.removeValue(forKey: clientID) }
    }
}
