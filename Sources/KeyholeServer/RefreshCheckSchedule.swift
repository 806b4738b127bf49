import KeyholeStore

/// Which users' refresh checks fall due, without a walk through every user at each pass (a pass over
/// a million users found nothing due in about a second; the schedule answers in microseconds).
///
/// A walk through the users keeps the `capacity` earliest due times it found, and a horizon: the
/// earliest due time it left out, capped at `rewalkAfter` seconds after the walk began. Until the
/// horizon, no user outside the kept ones can fall due:
/// - a user left out was due at the horizon or later;
/// - a grant stored after the walk began (a sign-in, a check by any host) is due `interval` (a day at
///   least) after it was stored, so after the horizon, since `rewalkAfter` is shorter than that.
///
/// A kept entry may be stale (the user signed in again, another host checked them): the check
/// re-reads the user and finds it not due, and the entry is dropped (its new due time is past the
/// horizon). At the horizon the users are walked again, and also between checks once the last walk
/// is `rewalkAfter` old, so that a long backlog (keyholed stopped for a day) cannot put the next walk
/// off: a check another host claimed, and then failed, waits here until the next walk at most, and a
/// grant stored since the last walk is always found before it falls due. No I/O: `AppleRefreshChecks`
/// walks, checks and calls back.
package struct RefreshCheckSchedule: Sendable {
    /// How many due times a walk keeps.
    let capacity: Int
    /// The longest time from one walk to the next, in seconds: shorter than a check's interval.
    let rewalkAfter: Int64

    /// The kept entries, latest due first: the earliest is `last`.
    private var queue: [(due: Int64, principal: Principal)] = []
    /// Before this time no user outside `queue` falls due; nil until a walk ends.
    package private(set) var horizon: Int64?
    /// When the walk that made this schedule began; nil until one ends.
    private var walkedAt: Int64?

    /// An empty schedule: the first pass walks.
    package init(capacity: Int, rewalkAfter: Int64) {
        self.capacity = max(1, capacity)
        self.rewalkAfter = max(1, rewalkAfter)
    }

    /// How many entries are kept.
    package var count: Int { queue.count }

    /// Whether the users must be walked before `now`'s pass: none was, or its horizon came.
    func needsWalk(at now: Int64) -> Bool {
        guard let horizon else { return true }
        return now >= horizon
    }

    /// Whether the last walk began `rewalkAfter` ago or more (or there was none): checked between
    /// checks, so that a long backlog of due users still gets a walk that often.
    func walkIsOld(at now: Int64) -> Bool {
        guard let walkedAt else { return true }
        let (end, overflow) = walkedAt.addingReportingOverflow(rewalkAfter)
        return !overflow && now >= end
    }

    /// The earliest kept user due at `now` or before, taken out of the schedule; nil when none is.
    mutating func next(at now: Int64) -> Principal? {
        guard let earliest = queue.last, earliest.due <= now else { return nil }
        return queue.removeLast().principal
    }

    /// `principal`, taken out by `next`, is still due at `due` (its check failed): back in place.
    mutating func putBack(_ principal: Principal, due: Int64) {
        // Binary search for the first entry due earlier than `due` (the queue is latest first).
        var low = 0
        var high = queue.count
        while low < high {
            let middle = (low + high) / 2
            if queue[middle].due >= due { low = middle + 1 } else { high = middle }
        }
        queue.insert((due, principal), at: low)
    }

    /// A walk through the users, begun at `start`: `add` each user's due time, then `end` it into a
    /// schedule. Keeps the `capacity` earliest in a max-heap, so that memory stays bounded however
    /// many users there are.
    struct Walk {
        let start: Int64
        let capacity: Int
        let rewalkAfter: Int64
        /// A max-heap on `due`: the root is the latest kept, the one to drop for an earlier one.
        private var heap: [(due: Int64, principal: Principal)] = []
        /// The earliest due time left out.
        private var earliestDropped: Int64?

        fileprivate init(start: Int64, capacity: Int, rewalkAfter: Int64) {
            self.start = start
            self.capacity = capacity
            self.rewalkAfter = rewalkAfter
        }

        /// A user with a grant, due at `due`.
        mutating func add(_ principal: Principal, due: Int64) {
            if heap.count < capacity {
                heap.append((due, principal))
                siftUp(heap.count - 1)
                return
            }
            guard due < heap[0].due else {
                drop(due)
                return
            }
            drop(heap[0].due)
            heap[0] = (due, principal)
            siftDown(0)
        }

        private mutating func drop(_ due: Int64) {
            earliestDropped = min(earliestDropped ?? due, due)
        }

        private mutating func siftUp(_ index: Int) {
            var child = index
            while child > 0 {
                let parent = (child - 1) / 2
                guard heap[child].due > heap[parent].due else { return }
                heap.swapAt(child, parent)
                child = parent
            }
        }

        private mutating func siftDown(_ index: Int) {
            var parent = index
            while true {
                let left = 2 * parent + 1
                guard left < heap.count else { return }
                var largest = left
                if left + 1 < heap.count && heap[left + 1].due > heap[left].due { largest = left + 1 }
                guard heap[largest].due > heap[parent].due else { return }
                heap.swapAt(parent, largest)
                parent = largest
            }
        }

        /// The schedule this walk found: its entries, latest due first, and its horizon.
        consuming func end() -> RefreshCheckSchedule {
            var schedule = RefreshCheckSchedule(capacity: capacity, rewalkAfter: rewalkAfter)
            // Equal due times in the order of the subs' bytes: the same walk gives the same order.
            schedule.queue = heap.sorted {
                $0.due != $1.due ? $0.due > $1.due : $1.principal.sub.utf8.lexicographicallyPrecedes($0.principal.sub.utf8)
            }
            let (capped, overflow) = start.addingReportingOverflow(rewalkAfter)
            let cap = overflow ? Int64.max : capped
            schedule.horizon = min(cap, earliestDropped ?? cap)
            schedule.walkedAt = start
            return schedule
        }
    }

    /// A walk begun at `start`, to replace this schedule when it ends.
    func walk(startingAt start: Int64) -> Walk {
        Walk(start: start, capacity: capacity, rewalkAfter: rewalkAfter)
    }
}
