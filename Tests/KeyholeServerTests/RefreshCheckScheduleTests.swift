import KeyholeStore
import Testing

@testable import KeyholeServer

/// The refresh checks' schedule, without I/O: which due times a walk keeps, its horizon, and the
/// order checks come out in.
@Suite("Refresh check schedule")
struct RefreshCheckScheduleTests {
    static func user(_ sub: String) -> Principal { Principal(issuer: "apple", sub: sub) }

    static func walked(_ dues: [(String, Int64)], capacity: Int, rewalkAfter: Int64 = 3600, at start: Int64 = 1000) -> RefreshCheckSchedule {
        var walk = RefreshCheckSchedule(capacity: capacity, rewalkAfter: rewalkAfter).walk(startingAt: start)
        for (sub, due) in dues { walk.add(user(sub), due: due) }
        return walk.end()
    }

    @Test("a walk keeps the earliest due times within its capacity; the horizon is the earliest left out, and nothing comes out before its time")
    func keepsEarliest() {
        var schedule = RefreshCheckSchedule(capacity: 3, rewalkAfter: 3600)
        #expect(schedule.needsWalk(at: 0))
        schedule = Self.walked([("e", 1500), ("a", 900), ("d", 1400), ("b", 950), ("c", 1200)], capacity: 3)
        #expect(schedule.count == 3)
        #expect(schedule.horizon == 1400)
        #expect(!schedule.needsWalk(at: 1399))
        #expect(schedule.next(at: 899) == nil)
        #expect(schedule.next(at: 1000) == Self.user("a"))
        #expect(schedule.next(at: 1000) == Self.user("b"))
        #expect(schedule.next(at: 1000) == nil)
        #expect(schedule.next(at: 1300) == Self.user("c"))
        #expect(schedule.next(at: 10_000) == nil)
        // "d" and "e" were left out: the horizon brings the next walk before "d" falls due.
        #expect(schedule.needsWalk(at: 1400))
    }

    @Test("with every user kept, the horizon is rewalkAfter past the walk's start: grants stored after it are found by the next walk, before they fall due")
    func horizonCapped() {
        let schedule = Self.walked([("a", 90_000), ("b", 95_000)], capacity: 10, rewalkAfter: 3600, at: 1000)
        #expect(schedule.horizon == 4600)
        #expect(!schedule.needsWalk(at: 4599))
        #expect(schedule.needsWalk(at: 4600))
        let empty = Self.walked([], capacity: 10, rewalkAfter: 3600, at: 1000)
        #expect(empty.count == 0 && empty.horizon == 4600)
        // No overflow at the end of time.
        #expect(Self.walked([], capacity: 1, rewalkAfter: 3600, at: .max - 10).horizon == .max)
    }

    @Test("a walk is old rewalkAfter after it began, whatever the horizon: a backlog still gets walks that often")
    func walkAge() {
        var none = RefreshCheckSchedule(capacity: 1, rewalkAfter: 3600)
        #expect(none.walkIsOld(at: 0))
        // A backlog: the horizon (the earliest left out) is long past, the walk itself is new.
        none = Self.walked([("a", 10), ("b", 20)], capacity: 1, rewalkAfter: 3600, at: 1000)
        #expect(none.horizon == 20)
        #expect(!none.walkIsOld(at: 4599))
        #expect(none.walkIsOld(at: 4600))
        #expect(!Self.walked([], capacity: 1, rewalkAfter: 3600, at: .max - 10).walkIsOld(at: .max))
    }

    @Test("a check that failed goes back in due order; equal due times come out in the order of the subs' bytes, composed and decomposed forms apart")
    func putBackAndTies() {
        var schedule = Self.walked([("b", 100), ("d", 300), ("\u{e9}", 200), ("e\u{301}", 200)], capacity: 10)
        #expect(schedule.next(at: 1000) == Self.user("b"))
        schedule.putBack(Self.user("b"), due: 250)
        // "e" + U+0301 (65 cc 81) sorts before U+00E9 (c3 a9) by bytes; as Strings they are equal.
        let order = (0..<4).compactMap { _ in schedule.next(at: 1000) }.map { Array($0.sub.utf8) }
        #expect(order == [Array("e\u{301}".utf8), Array("\u{e9}".utf8), Array("b".utf8), Array("d".utf8)])
        #expect(schedule.next(at: 1000) == nil)
    }

    @Test("a walk past its capacity stays at its capacity, and keeps exactly the earliest, whatever the order users come in")
    func boundedWalk() {
        var generator = SystemRandomNumberGenerator()
        let dues = (0..<5000).map { ("u\($0)", Int64.random(in: 0..<1_000_000, using: &generator)) }
        var schedule = Self.walked(dues, capacity: 100, rewalkAfter: 10_000_000, at: 0)
        #expect(schedule.count == 100)
        let sorted = dues.map(\.1).sorted()
        #expect(schedule.horizon == sorted[100])
        var out: [Int64] = []
        while let principal = schedule.next(at: .max) { out.append(dues.first { $0.0 == principal.sub }!.1) }
        #expect(out == Array(sorted.prefix(100)))
    }
}
