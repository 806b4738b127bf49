import Logging

extension Store {
    /// Has changes made on an event loop committed by that loop, after the rest of its I/O pass, instead
    /// of by the committer thread: with `durability = .always` only, and while syncs are fast (see
    /// `Configuration.inlineSyncLimit`). One commit is scheduled at a time and takes everything queued
    /// by then, so with several loops a change may be committed by another loop's commit.
    ///
    /// This is Redis's way with `appendfsync always`: the loop reads every request that is ready,
    /// writes their records with one write and one fdatasync, then answers them, with no hand-over
    /// between threads. On a machine with few cores that hand-over (a wake-up of the committer, one of
    /// the loop for the answers, and more, shorter passes of the loop) costs more than the loop's wait
    /// for the disk. The price: the loop serves nothing else while the disk syncs, which is why slow
    /// syncs send commits back to the committer thread for a while, and so does writing a snapshot
    /// (whose fsync holds up the log's).
    ///
    /// Changes made where `scheduler` returns false (tasks, other threads) still go to the committer;
    /// both write under `writerLock`, so the log keeps its order.
    public func commitInline(using scheduler: @escaping InlineScheduler) {
        guard configuration.durability == .always, configuration.inlineSyncLimit != nil else { return }
        state.withLock { $0.inlineScheduler = scheduler }
    }

    /// Writes and syncs what is queued, on the calling thread, and completes those changes.
    func commitInline() {
        // From before the lock: waiting behind another writer stalls the loop just the same.
        let started = ContinuousClock.now
        writerLock.lock()
        let batch = state.withLock { state -> Batch? in
            state.inlineScheduled = false
            // Failing storage took back and failed what was queued; the committer probes.
            guard state.failure == nil, let batch = state.takeBatch(into: &scratch) else { return nil }
            state.committerBusySince = started
            return batch
        }
        guard let batch else {
            writerLock.unlock()
            return
        }
        let writing = ContinuousClock.now
        do throws(StoreError) {
            try writer.append(framed: &scratch.bytes, count: batch.count)
            try writer.sync()
        } catch {
            let logger = state.withLock { $0.logger } ?? Logger(label: "keyhole.store")
            let notify = fail(error, batch: batch, logger: logger)
            state.withLock { $0.committerBusySince = nil }
            writerLock.unlock()
            notify()
            // The committer probes the storage until it works again.
            ringDoorbell()
            return
        }
        let finished = ContinuousClock.now
        StoreMetrics.record(StoreMetrics.syncDuration, since: writing)
        let (signal, slow, observers) = state.withLock { state -> (Bool, (logger: Logger?, average: Double)?, [Completion]) in
            state.committerBusySince = nil
            state.countWritten(batch.count, bytes: scratch.bytes.count, synced: true)
            state.counters.inlineSyncs += 1
            var slow: (logger: Logger?, average: Double)?
            // An average, so that the odd sync of a few ms (now and then on most disks) does not
            // count, and a disk slow on every sync does after a few; one sync of over 8 times the
            // limit is enough on its own.
            let took = Self.seconds(finished - started)
            state.inlineSyncAverage += (took - state.inlineSyncAverage) / 8
            if let limit = configuration.inlineSyncLimit, state.inlineSyncAverage > Self.seconds(limit) {
                slow = (state.logger, state.inlineSyncAverage)
                state.inlinePausedUntil = finished + configuration.inlinePause
                state.inlineSyncAverage = 0
                state.counters.inlinePauses += 1
            }
            return (state.signalSnapshotIfDue(configuration), slow, state.markDurable(upTo: batch.lastLSN))
        }
        writerLock.unlock()
        if let slow {
            slow.logger?.warning("storage.slow_sync", metadata: [
                "average_sync_ms": "\((slow.average * 10_000).rounded() / 10)",
                "committer_thread_for_s": "\(Int(configuration.inlinePause / .seconds(1)))",
            ])
        }
        if signal { snapshotSignal.yield() }
        for waiter in batch.waiters { waiter(.success(())) }
        for observer in observers { observer(.success(())) }
    }
}
