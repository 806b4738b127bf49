import KeyholeIssuers
import KeyholeJOSE
import KeyholeProtocol
import KeyholeStore
import Logging
import NIOCore
import Synchronization

extension AppleOperations {
    /// One `apple.notification`: Apple's server-to-server notification, as the app's endpoint received
    /// it, verified and applied to the user it names.
    struct Notification: Sendable {
        let configuration: Configuration
        let registry: IssuerRegistry
        let store: any AppleStoring
        let seen: SeenNotifications
        let now: @Sendable () -> Double
        let logger: Logger

        /// What the event says.
        struct Event: Sendable {
            var type: String
            var sub: String
            var email: String?
            var isPrivateEmail: Bool?
        }

        func run(_ request: Request) async throws(ProtocolError) -> [String: JSONValue] {
            var arguments = Arguments(request)
            let payload = try arguments.string("payload", required: true, maxBytes: CompactJWS.maximumLength)!
            try arguments.finish()
            let signed = try await registry.verifySignature(of: payload, issuer: configuration.issuer)
            let time = Int64(now().rounded(.down))
            let (jti, acceptedUntil) = try checkClaims(signed, now: time)
            // Apple always sends iat; it orders notifications, and keeps a repeat after a restart from
            // being applied again (AppleNotificationMark).
            guard let issuedAt = signed.claims["iat"]?.intValue else {
                throw ProtocolError(code: .tokenClaimInvalid, message: "the notification has no integer iat")
            }
            let event = try Self.event(signed.claims["events"])
            SessionMetrics.notification(event.type)
            var answer: [String: JSONValue] = ["type": .string(event.type), "sub": .string(event.sub), "applied": false, "duplicate": false]
            // Claimed before it is applied, so that two deliveries at once apply it once; given back
            // when applying fails, so that Apple's retry applies it.
            guard seen.claim(jti, until: acceptedUntil, now: time) else {
                answer["duplicate"] = true
                return answer
            }
            let outcome: Outcome
            do {
                outcome = try await apply(event, jti: jti, issuedAt: issuedAt, now: time)
            } catch {
                seen.release(jti)
                throw error
            }
            let applied = outcome == .applied
            answer["applied"] = .bool(applied)
            answer["duplicate"] = .bool(outcome == .duplicate)
            logger.notice("apple.notification", metadata: ["type": "\(event.type)", "sub": "\(event.sub)", "applied": "\(applied)"])
            return answer
        }

        /// iss, aud among client_ids, exp and iat, jti; returns the jti and until when the token is
        /// accepted (exp plus the leeway).
        func checkClaims(_ signed: IssuerRegistry.SignedPayload, now: Int64) throws(ProtocolError) -> (String, Int64) {
            let claims = signed.claims
            let policy = signed.keys.configuration.policy
            guard case .string(let iss)? = claims["iss"], policy.acceptsIssuer(iss) else {
                throw ProtocolError(code: .tokenIssuerUnknown, message: "the notification's iss is not Apple's")
            }
            let audiences: [String]
            switch claims["aud"] {
            case .string(let audience)?: audiences = [audience]
            case .array(let values)?: audiences = values.compactMap(\.stringValue)
            default: throw ProtocolError(code: .tokenClaimInvalid, message: "the notification has no aud")
            }
            guard audiences.contains(where: configuration.clientIDs.containsExactly) else {
                throw ProtocolError(code: .tokenAudienceInvalid, message: "the notification's aud names none of [apple] client_ids")
            }
            guard let exp = claims["exp"]?.intValue else {
                throw ProtocolError(code: .tokenClaimInvalid, message: "the notification has no integer exp")
            }
            let (sum, overflow) = exp.addingReportingOverflow(policy.leeway)
            let acceptedUntil = overflow ? (exp > 0 ? Int64.max : Int64.min) : sum
            guard now < acceptedUntil else {
                throw ProtocolError(code: .tokenExpired, message: "the notification expired")
            }
            if let iat = claims["iat"]?.intValue, iat > now + policy.leeway {
                throw ProtocolError(code: .tokenNotYetValid, message: "the notification was issued in the future")
            }
            guard case .string(let jti)? = claims["jti"], !jti.isEmpty, jti.utf8.count <= 256 else {
                throw ProtocolError(code: .tokenClaimInvalid, message: "the notification has no jti of 1 to 256 bytes")
            }
            return (jti, acceptedUntil)
        }

        /// `events`: a JSON object, or (as Apple sends it) a string holding one.
        static func event(_ value: JSONValue?) throws(ProtocolError) -> Event {
            var members: [String: JSONValue]
            switch value {
            case .object(let object)?:
                members = object
            case .string(let text)?:
                guard case .object(let object)? = try? JSONValue.parse(ByteBuffer(string: text)) else {
                    throw ProtocolError(code: .tokenClaimInvalid, message: "the notification's events string is not a JSON object")
                }
                members = object
            default:
                throw ProtocolError(code: .tokenClaimInvalid, message: "the notification has no events object")
            }
            guard case .string(let type)? = members.removeValue(forKey: "type"), !type.isEmpty, type.utf8.count <= 64,
                case .string(let sub)? = members.removeValue(forKey: "sub"), !sub.isEmpty, sub.utf8.count <= Principal.maximumFieldBytes
            else {
                throw ProtocolError(code: .tokenClaimInvalid, message: "the notification's events need a type and a sub")
            }
            var event = Event(type: type, sub: sub)
            if case .string(let email)? = members["email"], !email.isEmpty, email.utf8.count <= 320 { event.email = email }
            event.isPrivateEmail = ClaimsProfile.appleBoolean(members["is_private_email"])
            return event
        }

        /// What applying a notification came to.
        enum Outcome: Equatable {
            case applied
            /// A user keyholed does not know, a type it does not act on, or a notification older than
            /// what the user's record has seen since.
            case notApplied
            /// The notification applied before, delivered again (after a restart: its jti is no
            /// longer in memory, but the record's mark has it).
            case duplicate
        }

        /// Applies the event to the user's record unless the record's mark for the event's family
        /// says it is a repeat or stale (AppleNotificationMark), noting it in the mark when applied.
        func apply(_ event: Event, jti: String, issuedAt: Int64, now time: Int64) async throws(ProtocolError) -> Outcome {
            let principal = Principal(issuer: configuration.issuer, sub: event.sub)
            guard let family = AppleNotificationMark.family(of: event.type) else { return .notApplied }
            let mark = AppleNotificationMark(issuedAt: issuedAt, jti: jti)
            // Worked out under the store's lock, in the closures below.
            let standing = Mutex(AppleNotificationMark.Standing.new)
            @Sendable func admits(_ user: User) -> Bool {
                let found = AppleNotificationMark.standing(of: jti, issuedAt: issuedAt, family: family, for: user)
                standing.withLock { $0 = found }
                return found == .new
            }
            func outcome(applied: Bool) -> Outcome {
                applied ? .applied : standing.withLock { $0 } == .duplicate ? .duplicate : .notApplied
            }
            switch event.type {
            case "consent-revoked":
                let revoke = configuration.onRevoked == .revokeSessions
                let changed = try await StoreCommit.stored { () async throws(StoreError) in
                    try await store.modifyUser(principal, now: time, revokeSessions: revoke) { user in
                        guard admits(user) else { return false }
                        // A grant issued (or found valid) after the notification is newer consent: a
                        // late retry or a replay after a restart must not undo it.
                        if let grant = AppleGrant(user), grant.checkedAt > issuedAt { return false }
                        AppleGrant.remove(from: &user, revokedAt: time)
                        mark.store(in: &user, family: family)
                        return true
                    }
                }
                if changed?.applied == true {
                    SessionMetrics.count(changed?.sessions ?? 0, in: SessionMetrics.consentRevoked)
                    logger.notice("apple.consent_revoked", metadata: [
                        "sub": "\(event.sub)", "on_revoked": "\(configuration.onRevoked.rawValue)",
                        "sessions_revoked": "\(changed?.sessions ?? 0)", "trigger": "notification", "audit": "true",
                    ])
                }
                return outcome(applied: changed?.applied == true)
            case "account-delete", "account-deleted":
                // Apple deleted the account (and its grants): nothing to revoke there. The record is
                // gone after, so a repeat finds nothing; one made since (the user signed up again)
                // is newer than the notification and stays.
                let deleted = try await StoreCommit.stored { () async throws(StoreError) in
                    try await store.deleteUser(principal, now: time, when: { user in user.map(admits) ?? true }, outbox: { _ in nil })
                }
                if deleted.deleted {
                    StoreOperations.logUserDeleted(
                        principal, sessions: Int64(deleted.sessions), trigger: "apple.notification", logger: logger)
                }
                return outcome(applied: deleted.deleted)
            default:
                let changed = try await StoreCommit.stored { () async throws(StoreError) in
                    try await store.modifyUser(principal, now: time, revokeSessions: false) { user in
                        guard admits(user) else { return false }
                        user.fields["email_enabled"] = .bool(event.type == "email-enabled")
                        if let email = event.email { user.fields["email"] = .string(email) }
                        if let isPrivate = event.isPrivateEmail { user.fields["is_private_email"] = .bool(isPrivate) }
                        mark.store(in: &user, family: family)
                        return true
                    }
                }
                return outcome(applied: changed?.applied == true)
            }
        }
    }
}
