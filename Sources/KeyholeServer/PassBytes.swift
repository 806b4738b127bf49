/// The bytes one `SocketLoop`'s connections write for sending in a pass, added to the server's count
/// (`stats`' `bytes.out`) once as the pass ends (`SocketLoop.passEnding`), not once per answer.
///
/// Each answer added its length to the shared atomic counter, which cost it an atomic addition and
/// a reference count of the counter (about 75 of ping's 5 500 instructions, counted by callgrind).
/// Connections add to `pending` instead: memory of this object's own, read and written through a
/// pointer, so that adding takes no reference count and no exclusivity check. Every write for
/// sending happens within a pass (events, jobs, accepts), and the pass records before it sends, so
/// the count lags the socket by at most the pass under way: `stats` reads the counts as of the last
/// pass of each loop, and its own answer was never in them.
///
/// Confined to its loop's thread, except `total`, which is atomic.
final class PassBytes: @unchecked Sendable {
    /// Where a connection adds the bytes of each answer it writes. Valid for this object's life: a
    /// connection keeps the object and reads the pointer through it.
    let pending: UnsafeMutablePointer<Int>
    private let total: ServerStats.Counter

    init(total: ServerStats.Counter) {
        self.total = total
        pending = .allocate(capacity: 1)
        pending.initialize(to: 0)
    }

    deinit { pending.deallocate() }

    /// Adds what the pass wrote to the total: the pass is ending.
    func record() {
        guard pending.pointee != 0 else { return }
        total.add(pending.pointee)
        pending.pointee = 0
    }
}
