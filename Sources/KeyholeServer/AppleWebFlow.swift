import KeyholeJOSE
import KeyholeProtocol
import KeyholeStore
import Synchronization

/// The pending authorizations of Sign in with Apple on the web, shared by every loop: `start` draws
/// an authorization's secrets and keeps their digests, `take` hands a callback its record once
/// (APPLE_WEB.md). `AppleWebPending` is the state machine; this holds it under a lock and sweeps it.
/// With a store shared by several hosts (`shared`), the records live there too, so that the callback
/// may reach another host; this host's state machine then only keeps its own peers within their
/// bounds (a record another host took stays counted here until it would have expired).
final class AppleWebFlow: Sendable {
    /// What `apple.authorize` hands out: the three secrets in the clear, which keyholed does not keep.
    struct Started {
        /// Goes to Apple in the URL and comes back in the callback's form.
        var state: String
        /// Goes to Apple in the URL and comes back as the identity token's `nonce` claim.
        var nonce: String
        /// The binding cookie's value: only the browser that started holds it.
        var binding: String
        var expiresAt: Int64
    }

    /// How often, at most, an authorization sweeps expired records out (seconds).
    static let sweepInterval: Int64 = 60

    private let state: Mutex<(pending: AppleWebPending, sweptAt: Int64)>
    /// Where every host finds the records (PostgreSQL), if anywhere but here.
    let shared: (any PendingSignInStoring)?
    /// Inserts into `shared` under way: an unauthenticated `/apple/start` costs a database write, so
    /// a flood of them must not take the pool from sessions.
    private let inserting = Atomic(0)
    /// The most inserts under way at once; past it a start is refused `overloaded`.
    static let maximumInserting = 32

    init(configuration: AppleWebPending.Configuration, shared: (any PendingSignInStoring)? = nil) {
        state = Mutex((AppleWebPending(configuration: configuration), 0))
        self.shared = shared
    }

    /// Pending authorizations now.
    var count: Int { state.withLock { $0.pending.count } }

    /// Draws a state, a nonce and a binding (32 random bytes each, base64url) and keeps their digests
    /// with what the callback needs. `overloaded` when the bound in all is reached and this peer has
    /// nothing of its own to give up; `internal` when the random generator fails.
    func start(
        clientID: String, redirectURI: String, returnTo: String, peer: UInt32, now: Int64, lifetime: Int64
    ) async throws(ProtocolError) -> Started {
        guard let state = Self.secret(), let nonce = Self.secret(), let binding = Self.secret(),
            let stateDigest = SHA256.digest(utf8: state), let nonceDigest = SHA256.digest(utf8: nonce),
            let bindingDigest = SHA256.digest(utf8: binding)
        else {
            throw .internal("the random generator failed: no authorization was started")
        }
        let record = AppleWebPending.Record(
            binding: bindingDigest, nonce: nonceDigest, clientID: clientID, redirectURI: redirectURI, returnTo: returnTo, peer: peer,
            expiresAt: now + lifetime)
        let (kept, dropped) = self.state.withLock { current -> (Bool, SHA256.Digest?) in
            if now - current.sweptAt >= Self.sweepInterval {
                _ = current.pending.sweep(now: now)
                current.sweptAt = now
            }
            return current.pending.insertReporting(state: stateDigest, record: record)
        }
        guard kept else {
            throw .overloaded("keyholed holds as many pending Sign in with Apple authorizations as it may ([apple] web_pending_max)", retryAfterMs: 1000)
        }
        if let shared {
            guard inserting.wrappingAdd(1, ordering: .relaxed).newValue <= Self.maximumInserting else {
                inserting.wrappingSubtract(1, ordering: .relaxed)
                _ = self.state.withLock { $0.pending.forget(state: stateDigest) }
                throw .overloaded("too many Sign in with Apple authorizations are being started at once", retryAfterMs: 100)
            }
            defer { inserting.wrappingSubtract(1, ordering: .relaxed) }
            let pending = PendingSignIn(
                stateHash: stateDigest.bytes, bindingHash: bindingDigest.bytes, nonceHash: nonceDigest.bytes, clientID: clientID,
                redirectURI: redirectURI, returnTo: returnTo, peer: peer, expiresAt: record.expiresAt)
            do {
                try await shared.addPending(pending, dropping: dropped.map { [$0.bytes] } ?? [])
            } catch {
                _ = self.state.withLock { $0.pending.forget(state: stateDigest) }
                throw StoreCommit.protocolError(error)
            }
        }
        return Started(state: state, nonce: nonce, binding: binding, expiresAt: record.expiresAt)
    }

    /// The record of `state` for the browser holding `binding`, taken out whatever the outcome.
    func take(state: String, binding: String, now: Int64) async throws(ProtocolError) -> Result<AppleWebPending.Record, AppleWebPending.Refusal> {
        guard let stateDigest = SHA256.digest(utf8: state), let bindingDigest = SHA256.digest(utf8: binding) else {
            return .failure(.unknown)
        }
        guard let shared else {
            return self.state.withLock { $0.pending.take(state: stateDigest, binding: bindingDigest, now: now) }
        }
        let taken: PendingSignIn?
        do {
            taken = try await shared.takePending(stateHash: stateDigest.bytes)
        } catch {
            throw StoreCommit.protocolError(error)
        }
        _ = self.state.withLock { $0.pending.forget(state: stateDigest) }
        guard let taken, let binding = SHA256.Digest(bytes: taken.bindingHash), let nonce = SHA256.Digest(bytes: taken.nonceHash) else {
            return .failure(.unknown)
        }
        let record = AppleWebPending.Record(
            binding: binding, nonce: nonce, clientID: taken.clientID, redirectURI: taken.redirectURI, returnTo: taken.returnTo, peer: taken.peer,
            expiresAt: taken.expiresAt)
        return AppleWebPending.judge(record, binding: bindingDigest, now: now)
    }

    private static func secret() -> String? {
        SecureRandom.withBytes32 { Base64URL.encode($0) }
    }
}
