import Synchronization

/// The issuers a registry serves, shared by its copies and swapped whole on a reload, with the
/// streams of those who follow the changes (the key-set refresher).
final class IssuerDirectory: Sendable {
    private struct State {
        var issuers: [IssuerKeys]
        var followers: [Int: AsyncStream<[IssuerKeys]>.Continuation] = [:]
        var nextFollower = 0
    }

    private let state: Mutex<State>

    init(_ issuers: [IssuerKeys]) {
        state = Mutex(State(issuers: issuers))
    }

    /// The issuers now: one lock hold and a retain, cheap enough for every request.
    var issuers: [IssuerKeys] { state.withLock { $0.issuers } }

    func replace(_ issuers: [IssuerKeys]) {
        // Yielded under the lock, so that followers see replacements in the order they happened.
        state.withLock { state in
            state.issuers = issuers
            for follower in state.followers.values { follower.yield(issuers) }
        }
    }

    /// The issuers now, then each replacement; the newest only when the follower lags behind.
    func changes() -> AsyncStream<[IssuerKeys]> {
        let (stream, continuation) = AsyncStream.makeStream(of: [IssuerKeys].self, bufferingPolicy: .bufferingNewest(1))
        let id = state.withLock { state in
            let id = state.nextFollower
            state.nextFollower += 1
            state.followers[id] = continuation
            continuation.yield(state.issuers)
            return id
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.followers.removeValue(forKey: id) }
        }
        return stream
    }
}
