import CoreMetrics
import KeyholeJOSE
import KeyholeProtocol
import Logging
import NIOCore

extension IssuerKeys {
    /// The refresh loop of a remote issuer: performs `KeySetCacheState`'s actions until the task is
    /// cancelled, then releases every request still waiting. Returns at once for file-based keys.
    ///
    /// - Parameters:
    ///   - store: where each fetched key set is persisted, so a restart during an outage verifies.
    public func run(fetcher: KeySetFetcher, store: KeySetStore?, logger: Logger) async {
        guard configuration.keySet.isRemote else { return }
        let now = clock.now()
        var action = state.withLock { $0.cache.start(now: now) }
        while !Task.isCancelled && !state.withLock({ $0.retired }) {
            // A request's fetch goes first: its callers are waiting.
            if let reason = state.withLock({ state in defer { state.requested = nil }; return state.requested }) {
                action = .fetch(reason)
            }
            switch action {
            case .fetch(let reason):
                action = await fetch(reason, fetcher: fetcher, store: store, logger: logger)
            case .wakeUp(let deadline):
                await waitForWakeUp(until: deadline)
                action = timerFired()
            case .none:
                await waitForWakeUp(until: nil)
                action = timerFired()
            }
            notifyObservers()
        }
        let waiters = state.withLock { state in
            state.stopped = true
            defer { state.waiters = [] }
            return state.waiters
        }
        for waiter in waiters { waiter.resume(returning: .notFetched) }
        notifyObservers()
    }

    private func timerFired() -> KeySetCacheState.Action {
        let now = clock.now()
        return state.withLock { state in state.requested == nil ? state.cache.timerFired(now: now) : .none }
    }

    /// One fetch: discovery if needed, the key set, the swap, the persisted copy.
    private func fetch(
        _ reason: KeySetCacheState.FetchReason, fetcher: KeySetFetcher, store: KeySetStore?, logger: Logger
    ) async -> KeySetCacheState.Action {
        let fetched: KeySetFetcher.Fetched
        let keys: JWKSet
        do throws(KeySetFetcher.Failure) {
            let url = try await keySetURL(fetcher: fetcher)
            fetched = try await fetcher.fetch(url)
            // Keys the last good set already holds are taken from it, not made again (issue 26,
            // finding 5): a refresh of an unchanged set costs libcrypto nothing.
            let previous = state.withLock { $0.cache.keys }
            do {
                keys = try JWKSet(json: fetched.document, reusing: previous)
            } catch {
                throw KeySetFetcher.Failure(description: "\(url): \(error.message)")
            }
            // A set without one usable key is far likelier a broken endpoint than an issuer revoking
            // every key at once: the last good keys stay, and the failure shows in jwks.status.
            guard !keys.keys.isEmpty else {
                let skipped = keys.skipped.isEmpty ? "" : " (\(keys.skipped.prefix(4).joined(separator: "; ")))"
                throw KeySetFetcher.Failure(description: "\(url) holds no usable key\(skipped)")
            }
        } catch {
            return failed(error.description, reason: reason, logger: logger)
        }

        // Fetches are rare: the handle is looked up each time rather than kept.
        Counter(label: "keyholed_key_set_fetches_total", dimensions: [("issuer", configuration.name), ("result", "ok")]).increment()
        let now = clock.now()
        let (action, inUse, expiresAt, waiters, listeners, before) = state.withLock { state in
            let before = state.cache.keys.map { Set($0.keys.map { $0.kid ?? "" }) }
            let inUse = keys.reusingKeys(of: state.cache.keys)
            let action = state.cache.fetchSucceeded(inUse, maxAge: fetched.maxAge, now: now)
            state.verifier = JWTVerifier(keys: inUse, algorithms: configuration.algorithms, policy: configuration.policy)
            defer { state.waiters = [] }
            return (action, inUse, state.cache.expiresAt ?? now, state.waiters, state.keysChanged, before)
        }
        // Listeners first: whoever waited on this fetch (jwks.refresh, a token with a new kid) must find
        // the verified-token cache already purged of keys that left the set, as jwks.status shows it.
        for listener in listeners { listener(inUse) }
        for waiter in waiters { waiter.resume(returning: .succeeded) }
        // Metadata is written sorted by key, and `issuer.keys_fetched issuer=...` is what operators
        // and tests look for: no key may sort before `issuer` (hence keys_built, not built).
        logger.info("issuer.keys_fetched", metadata: [
            "issuer": "\(configuration.name)", "reason": "\(reason.rawValue)", "keys": "\(inUse.keys.count)",
            "kids": "\(inUse.keys.compactMap(\.kid).joined(separator: ","))", "ttl_s": "\(Int(expiresAt - now))",
            "skipped": "\(keys.skipped.count)", "keys_built": "\(keys.built)",
        ])
        // Keys coming and going is what an issuer's key rotation looks like, and what a compromised
        // endpoint would look like too: worth a line of its own.
        let after = Set(inUse.keys.map { $0.kid ?? "" })
        if before != after {
            let removed = (before ?? []).subtracting(after).sorted()
            logger.notice("issuer.keys_changed", metadata: [
                "issuer": "\(configuration.name)", "added": "\(after.subtracting(before ?? []).sorted().joined(separator: ","))",
                "removed": "\(removed.joined(separator: ","))", "audit": "true",
            ])
        }
        if let store {
            do {
                try store.save(fetched.document, for: configuration, fetchedAt: now, expiresAt: expiresAt)
            } catch {
                logger.warning("issuer.keys_not_persisted", metadata: ["issuer": "\(configuration.name)", "error": "\(error)"])
            }
        }
        return action
    }

    private func failed(_ message: String, reason: KeySetCacheState.FetchReason, logger: Logger) -> KeySetCacheState.Action {
        Counter(label: "keyholed_key_set_fetches_total", dimensions: [("issuer", configuration.name), ("result", "error")]).increment()
        let now = clock.now()
        let (action, waiters, hasKeys) = state.withLock { state in
            // Discovery runs again before the next attempt: the issuer may have moved its keys.
            state.discoveredURL = nil
            let action = state.cache.fetchFailed(message, now: now, jitter: Double.random(in: 0..<1))
            defer { state.waiters = [] }
            return (action, state.waiters, state.cache.usableKeys(now: now) != nil)
        }
        for waiter in waiters { waiter.resume(returning: .failed(message)) }
        logger.warning("issuer.keys_fetch_failed", metadata: [
            "issuer": "\(configuration.name)", "reason": "\(reason.rawValue)", "error": "\(message)",
            "serving_last_good_keys": "\(hasKeys)", "audit": "true",
        ])
        return action
    }

    /// The configured URL, or the one OpenID Connect discovery gives.
    private func keySetURL(fetcher: KeySetFetcher) async throws(KeySetFetcher.Failure) -> String {
        switch configuration.keySet {
        case .url(let url):
            return url
        case .file(let path):
            throw KeySetFetcher.Failure(description: "\(path) is a file, not fetched")
        case .discovery(let issuerURL):
            if let known = state.withLock({ $0.discoveredURL }) { return known }
            let url = try await fetcher.discoverKeySetURL(issuer: issuerURL)
            state.withLock { $0.discoveredURL = url }
            return url
        }
    }

    /// Waits until `deadline` (if any) or until a request pokes the loop, whichever comes first.
    private func waitForWakeUp(until deadline: Double?) async {
        await withTaskGroup(of: Void.self) { group in
            if let deadline {
                group.addTask { [clock] in try? await clock.sleep(until: deadline) }
            }
            group.addTask { await self.waitForPoke() }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForPoke() async {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let now = state.withLock { state -> Bool in
                    // Cancelled before the continuation was stored: the handler found nothing to resume.
                    if state.poked || Task.isCancelled {
                        state.poked = false
                        return true
                    }
                    state.wake = continuation
                    return false
                }
                if now { continuation.resume() }
            }
        } onCancel: {
            state.withLock { state in defer { state.wake = nil }; return state.wake }?.resume()
        }
    }
}
