import KeyholeJOSE
import KeyholeProtocol
import Synchronization

/// The pending authorizations of Sign in with Apple on the web, shared by every loop: `start` draws
/// an authorization's secrets and keeps their digests, `take` hands a callback its record once
/// (APPLE_WEB.md). `AppleWebPending` is the state machine; this holds it under a lock and sweeps it.
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

    init(configuration: AppleWebPending.Configuration) {
        state = Mutex((AppleWebPending(configuration: configuration), 0))
    }

    /// Pending authorizations now.
    var count: Int { state.withLock { $0.pending.count } }

    /// Draws a state, a nonce and a binding (32 random bytes each, base64url) and keeps their digests
    /// with what the callback needs. `overloaded` when the bound in all is reached and this peer has
    /// nothing of its own to give up; `internal` when the random generator fails.
    func start(
        clientID: String, redirectURI: String, returnTo: String, peer: UInt32, now: Int64, lifetime: Int64
    ) throws(ProtocolError) -> Started {
        guard let state = Self.secret(), let nonce = Self.secret(), let binding = Self.secret(),
            let stateDigest = SHA256.digest(utf8: state), let nonceDigest = SHA256.digest(utf8: nonce),
            let bindingDigest = SHA256.digest(utf8: binding)
        else {
            throw .internal("the random generator failed: no authorization was started")
        }
        let record = AppleWebPending.Record(
            binding: bindingDigest, nonce: nonceDigest, clientID: clientID, redirectURI: redirectURI, returnTo: returnTo, peer: peer,
            expiresAt: now + lifetime)
        let kept = self.state.withLock { current -> Bool in
            if now - current.sweptAt >= Self.sweepInterval {
                _ = current.pending.sweep(now: now)
                current.sweptAt = now
            }
            return current.pending.insert(state: stateDigest, record: record)
        }
        guard kept else {
            throw .overloaded("keyholed holds as many pending Sign in with Apple authorizations as it may ([apple] web_pending_max)", retryAfterMs: 1000)
        }
        return Started(state: state, nonce: nonce, binding: binding, expiresAt: record.expiresAt)
    }

    /// The record of `state` for the browser holding `binding`, taken out whatever the outcome.
    func take(state: String, binding: String, now: Int64) -> Result<AppleWebPending.Record, AppleWebPending.Refusal> {
        guard let stateDigest = SHA256.digest(utf8: state), let bindingDigest = SHA256.digest(utf8: binding) else {
            return .failure(.unknown)
        }
        return self.state.withLock { $0.pending.take(state: stateDigest, binding: bindingDigest, now: now) }
    }

    private static func secret() -> String? {
        SecureRandom.withBytes32 { Base64URL.encode($0) }
    }
}
