import Logging

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

extension Store {
    /// Records taken from the queue to be written together; their bytes are in `scratch.bytes`, after
    /// room for the batch header.
    struct Batch {
        var count: Int
        var undo: [StoreTables.Undo]
        var waiters: [Completion]
        /// The LSN of its last record.
        var lastLSN: UInt64
    }

    /// The buffers a batch is swapped into: the last batch's, emptied, go back to the queue in its
    /// place, so that queueing allocates only when a batch outgrows every earlier one.
    struct Scratch {
        var bytes = Store.emptyBatch
        var undo: [StoreTables.Undo] = []
        var waiters: [Completion] = []
    }

    typealias CutWaiter = @Sendable (Result<(sequence: UInt64, firstLSN: UInt64), StoreError>) -> Void

    private enum Step {
        case write(Batch)
        case cut([CutWaiter])
        case probe
        case wait(seconds: Double)
        case stop
    }

    /// Runs the committer on a thread of its own until `stop()`; `finished` runs when everything queued
    /// has been written (and synced, whatever the durability) and the thread ends.
    func startCommitter(logger: Logger, finished: @escaping @Sendable () -> Void) {
        state.withLock { $0.logger = logger }
        StoreThread.start(name: "keyhole-wal") { [self] in
            commitLoop(logger: logger)
            finished()
        }
    }

    /// Refuses new changes, and has the committer write what is queued and end.
    func stop() {
        state.withLock { $0.stopping = true }
        ringDoorbell()
    }

    private func commitLoop(logger: Logger) {
        var lastSync = ContinuousClock.now
        var unsynced = false
        while true {
            // Held for the whole step (but released to wait): an inline commit must not take a later
            // batch and write it before this one.
            writerLock.lock()
            let now = ContinuousClock.now
            let step = state.withLock { state -> Step in
                // When the step taken now began, until one finds nothing to do: a write or sync that
                // never returns shows as a step that only grows older (the watchdog's measure).
                state.committerBusySince = now
                if state.failure != nil {
                    if state.stopping { return .stop }
                    if now >= state.probeDue { return .probe }
                    state.committerWaiting = true
                    state.committerBusySince = nil
                    return .wait(seconds: Self.seconds(state.probeDue - now))
                }
                if !state.cutWaiters.isEmpty && !state.stopping {
                    defer { state.cutWaiters = [] }
                    return .cut(state.cutWaiters)
                }
                if let batch = state.takeBatch(into: &scratch) { return .write(batch) }
                if state.stopping { return .stop }
                state.committerWaiting = true
                state.committerBusySince = nil
                // Woken by changes; else once per quietWriteDelay, for touches queued without a wake-up.
                var wait = configuration.quietWriteDelay
                if unsynced, case .batch(let interval) = configuration.durability {
                    wait = min(wait, max(.zero, lastSync + interval - now))
                }
                return .wait(seconds: Self.seconds(wait))
            }
            if case .wait(let seconds) = step {
                writerLock.unlock()
                if doorbell.lock(whenValue: 1, timeoutSeconds: seconds) { doorbell.unlock(withValue: 0) }
                continue
            }
            // Callers are told once the lock is released (defers run last first): an event loop waiting
            // for the lock to commit does not wait for them too.
            var notices: [() -> Void] = []
            defer { for notice in notices { notice() } }
            defer { writerLock.unlock() }
            switch step {
            case .write(let batch):
                do throws(StoreError) {
                    let started = ContinuousClock.now
                    try writer.append(framed: &scratch.bytes, count: batch.count)
                    if configuration.durability == .always {
                        try writer.sync()
                        StoreMetrics.record(StoreMetrics.syncDuration, since: started)
                        lastSync = ContinuousClock.now
                    } else {
                        unsynced = true
                    }
                } catch {
                    notices.append(fail(error, batch: batch, logger: logger))
                    continue
                }
                let (signal, observers) = state.withLock { state in
                    state.countWritten(batch.count, bytes: scratch.bytes.count, synced: configuration.durability == .always)
                    return (state.signalSnapshotIfDue(configuration), state.markDurable(upTo: batch.lastLSN))
                }
                if signal { snapshotSignal.yield() }
                notices.append {
                    for waiter in batch.waiters { waiter(.success(())) }
                    for observer in observers { observer(.success(())) }
                }
            case .cut(let waiters):
                do throws(StoreError) {
                    let before = writer.sequence
                    let cut = try writer.cut()
                    if cut.sequence != before { state.withLock { $0.counters.walBytes += WALSegmentHeader.size } }
                    notices.append { for waiter in waiters { waiter(.success(cut)) } }
                } catch {
                    notices.append(fail(error, batch: nil, logger: logger))
                    notices.append { for waiter in waiters { waiter(.failure(.unavailable("storage is failing: \(error.message)"))) } }
                }
            case .probe:
                if probe(logger: logger) {
                    lastSync = ContinuousClock.now
                    unsynced = false
                } else {
                    state.withLock { $0.probeDue = ContinuousClock.now + configuration.retryInterval }
                }
            case .wait:
                preconditionFailure("waits are taken above")
            case .stop:
                let cutWaiters = state.withLock { state in
                    defer { state.cutWaiters = [] }
                    return state.cutWaiters
                }
                notices.append { for waiter in cutWaiters { waiter(.failure(.unavailable("the store is stopping"))) } }
                // A clean stop leaves everything durable, whatever the configured durability.
                if (try? writer.sync(rollingBack: false)) != nil, unsynced {
                    state.withLock { $0.counters.syncs += 1 }
                }
                return
            }
            if unsynced, case .batch(let interval) = configuration.durability, ContinuousClock.now - lastSync >= interval {
                do throws(StoreError) {
                    // What was written is acknowledged: a failed sync must not cut it (see `sync`).
                    try writer.sync(rollingBack: false)
                    state.withLock { $0.counters.syncs += 1 }
                    lastSync = ContinuousClock.now
                    unsynced = false
                } catch {
                    notices.append(fail(error, batch: nil, logger: logger))
                }
            }
        }
    }

    /// A write or sync failed: every change not on disk is taken back, newest first, and fails; writes
    /// are refused until a probe succeeds, the first after `retryInterval`. Called under `writerLock`;
    /// returns what tells the failed changes, to be called once it is released.
    func fail(_ error: StoreError, batch: Batch?, logger: Logger) -> () -> Void {
        let (waiters, cutWaiters) = state.withLock { state -> ([Completion], [CutWaiter]) in
            state.tables.rollBack(state.pendingUndo)
            if let batch { state.tables.rollBack(batch.undo) }
            var waiters = (batch?.waiters ?? []) + state.pendingWaiters
            state.pending.removeSubrange(WALBatchHeader.size...)
            state.pendingCount = 0
            state.pendingUndo = []
            state.pendingWaiters = []
            state.nextLSN = writer.nextLSN
            waiters += state.takeBackObservers()
            state.failure = error.message
            state.failedAt = Self.wallClock()
            state.probeDue = ContinuousClock.now + configuration.retryInterval
            state.counters.failures += 1
            // With batch durability, changes written before this were acknowledged: a failed sync
            // (here, at a segment cut or on its own) may have lost them from the disk while Linux still
            // reads them back from memory, and no later sync writes them again.
            if case .batch = configuration.durability { state.resyncDue = true }
            defer { state.cutWaiters = [] }
            return (waiters, state.cutWaiters)
        }
        logger.error("storage.failed", metadata: ["error": "\(error.message)", "changes_failed": "\(waiters.count)", "audit": "true"])
        let refusal = StoreError.unavailable("storage is failing: \(error.message)")
        return {
            for waiter in waiters { waiter(.failure(refusal)) }
            for waiter in cutWaiters { waiter(.failure(refusal)) }
        }
    }

    /// Writes and syncs a noop record; on success, writes are accepted again.
    private func probe(logger: Logger) -> Bool {
        var bytes = Store.emptyBatch
        let lsn = state.withLock { state in
            let lsn = state.nextLSN
            state.enqueue(.noop)
            swap(&bytes, &state.pending)
            state.pendingCount = 0
            return lsn
        }
        precondition(lsn == writer.nextLSN, "the store's LSN and the log's disagree")
        do throws(StoreError) {
            try writer.append(framed: &bytes, count: 1)
            // Batch durability: what the log holds was acknowledged, and a failed probe must not cut it.
            try writer.sync(rollingBack: configuration.durability == .always)
        } catch {
            state.withLock { $0.nextLSN = writer.nextLSN }
            logger.debug("storage.probe_failed", metadata: ["error": "\(error.message)"])
            return false
        }
        let (since, signal) = state.withLock { state -> (Int64?, Bool) in
            state.failure = nil
            state.countWritten(1, bytes: bytes.count, synced: true)
            // Nobody observes while writes are refused: this only moves the mark past the probe.
            _ = state.markDurable(upTo: state.nextLSN - 1)
            // Acknowledged changes a failed sync may have lost go to disk again, in a snapshot.
            return (state.failedAt, state.signalSnapshotIfDue(configuration))
        }
        logger.notice("storage.recovered", metadata: ["failed_for_s": "\(since.map { Self.wallClock() - $0 } ?? 0)"])
        if signal { snapshotSignal.yield() }
        return true
    }

    static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return max(0, Double(seconds) + Double(attoseconds) / 1e18)
    }

    static func wallClock() -> Int64 {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        return Int64(now.tv_sec)
    }
}

extension Store.State {
    /// Moves what is queued into `scratch` (whose emptied buffers take its place in the queue), as a
    /// batch; nil when nothing is queued. Under `writerLock`.
    mutating func takeBatch(into scratch: inout Store.Scratch) -> Store.Batch? {
        guard pendingCount > 0 else { return nil }
        // The last batch is gone by now, so these are uniquely held and keep their storage.
        scratch.bytes.removeSubrange(WALBatchHeader.size...)
        scratch.undo.removeAll(keepingCapacity: true)
        scratch.waiters.removeAll(keepingCapacity: true)
        swap(&scratch.bytes, &pending)
        swap(&scratch.undo, &pendingUndo)
        swap(&scratch.waiters, &pendingWaiters)
        defer { pendingCount = 0 }
        return Store.Batch(count: pendingCount, undo: scratch.undo, waiters: scratch.waiters, lastLSN: nextLSN - 1)
    }

    /// Counts `records` written to the log in `bytes` (one batch, its header included), and one sync
    /// for them when `synced`.
    mutating func countWritten(_ records: Int, bytes: Int, synced: Bool) {
        counters.records += records
        counters.walBytes += bytes
        if synced {
            counters.syncs += 1
            counters.syncedRecords += records
        }
    }
}
