/// Answers that rest on changes not yet durable wait for them.
///
/// A change is applied to the tables when it is queued, before its batch reaches the disk: its own
/// answer waits for its completion, but a read (or a change with nothing to write) that sees it could
/// answer at once, and a crash before the sync would then take back what that answer told. So such
/// an answer waits until the log is durable up to the last change applied when it was made; when
/// nothing applied is still waiting for the disk, which is the usual case, it goes at once.
///
/// A change is done for an answer when it is as durable as configured: with `fsync = "batch"` or
/// `"off"`, that is when it is written, as for the change's own answer.
extension Store {
    /// Reads with `read`, then calls `completion` when everything the read could have seen is as
    /// durable as configured: at once (before returning) when it already is. When a write failed
    /// meanwhile, the changes the read may have seen were taken back: `completion` gets
    /// `StoreError.unavailable` (the caller retries).
    public func observing<Value>(_ read: () -> Value, completion: @escaping Completion) -> Value {
        let (value, now) = observing(read) { completion }
        if let now { completion(now) }
        return value
    }

    /// `observing(_:completion:)` for a hot path: returns the read's value and, when the answer need
    /// not wait, how it stands (`.success`, or `.failure` when a write failed meanwhile); only when it
    /// must wait is `waiter` called (under the store's lock: it must only make the completion), and
    /// the completion it makes runs once the wait is over.
    public func observing<Value>(
        _ read: () -> Value, waiter: () -> Completion
    ) -> (value: Value, now: Result<Void, StoreError>?) {
        let epoch = state.withLock { $0.failureEpoch }
        let value = read()
        let now = state.withLock { state -> Result<Void, StoreError>? in
            guard state.failureEpoch == epoch else {
                return .failure(.unavailable("storage failed while this was read: \(state.failure ?? "a write failed")"))
            }
            return state.observe(waiter()) ? nil : .success(())
        }
        return (value, now)
    }
}

extension Store {
    /// Reads waiting for the disk now: for tests, to know a read is waiting before they let the disk go on.
    package var waitingReads: Int { state.withLock { $0.observers.count } }
}

extension Store.State {
    /// Keeps `completion` until the log is durable up to the last change applied; returns false
    /// (keeping nothing, and not making `completion`) when it already is, and the caller completes
    /// at once.
    mutating func observe(_ completion: @autoclosure () -> Store.Completion) -> Bool {
        guard lastChangeLSN > durableLSN else { return false }
        observers.append((lastChangeLSN, completion()))
        return true
    }

    /// A batch ending at `lsn` is as durable as configured: the observers it satisfies, to call once
    /// the lock is released.
    mutating func markDurable(upTo lsn: UInt64) -> [Store.Completion] {
        durableLSN = max(durableLSN, lsn)
        let ready = observers.prefix { $0.lsn <= durableLSN }.map(\.completion)
        observers.removeFirst(ready.count)
        return ready
    }

    /// A write failed and every change not on disk was taken back (the log ends at `nextLSN - 1`):
    /// what observers saw may be gone. Returns them, to fail once the lock is released.
    mutating func takeBackObservers() -> [Store.Completion] {
        failureEpoch &+= 1
        durableLSN = nextLSN - 1
        lastChangeLSN = min(lastChangeLSN, durableLSN)
        defer { observers = [] }
        return observers.map(\.completion)
    }
}
