import KeyholeProtocol
import Testing
@testable import KeyholeStore

/// The in-memory tables without I/O: sessions, users, expiry by the clock given, and undo.
@Suite("Store tables")
struct StoreTablesTests {
    static let alice = Principal(issuer: "apple", sub: "alice")
    static let bob = Principal(issuer: "apple", sub: "bob")

    static func new(_ n: UInt64, _ principal: Principal, at time: Int64 = 1000, ttl: Int64 = 3600, idle: UInt32 = 600) -> StoreRecord.NewSession {
        StoreRecord.NewSession(
            id: SessionID(high: n, low: n), check: SessionCheck(high: n, low: ~n), principal: principal, createdAt: time,
            expiresAt: time + ttl, idleSeconds: idle, data: nil)
    }

    /// Everything observable, to compare states.
    static func picture(_ tables: StoreTables, now: Int64 = 1000) -> String {
        [alice, bob].map { principal in
            "\(principal): user=\(tables.user(principal).map { "\($0.createdAt)/\($0.lastLoginAt ?? -1)/\($0.fields)" } ?? "none") "
                + "sessions=\(tables.sessions(of: principal, now: now).map { "\($0.id.high)@\($0.lastSeenAt)" })"
        }.joined(separator: "; ") + " count=\(tables.sessionCount) users=\(tables.userCount)"
    }

    @Test("a session is found by id and check, not by id alone with a wrong check")
    func lookup() {
        var tables = StoreTables()
        var none: [StoreTables.Undo]? = nil
        tables.create(Self.new(1, Self.alice), undo: &none)
        #expect(tables.slot(of: SessionID(high: 1, low: 1), check: SessionCheck(high: 1, low: ~1)) != nil)
        #expect(tables.slot(of: SessionID(high: 1, low: 1), check: SessionCheck(high: 1, low: 0)) == nil)
        #expect(tables.slot(of: SessionID(high: 2, low: 2), check: SessionCheck(high: 2, low: ~2)) == nil)
        // The first session created the user, with its time as created and last login.
        #expect(tables.user(Self.alice)?.createdAt == 1000)
        #expect(tables.user(Self.alice)?.lastLoginAt == 1000)
    }

    @Test("sessions end at the absolute TTL and at the idle deadline, which touches push back")
    func expiry() {
        var tables = StoreTables()
        var none: [StoreTables.Undo]? = nil
        tables.create(Self.new(1, Self.alice, at: 1000, ttl: 3600, idle: 600), undo: &none)
        let slot = tables.slot(of: SessionID(high: 1, low: 1))!
        #expect(!tables.isExpired(slot, now: 1599))
        #expect(tables.isExpired(slot, now: 1600))
        // Touched at 1500: idle until 2100; the TTL (4600) still caps it.
        #expect(tables.touch(slot, now: 1500, touchInterval: 60, undo: &none) != nil)
        #expect(!tables.isExpired(slot, now: 2099))
        #expect(tables.isExpired(slot, now: 2100))
        for time in stride(from: Int64(1500), through: 4500, by: 500) {
            _ = tables.touch(slot, now: time, touchInterval: 60, undo: &none)
        }
        #expect(!tables.isExpired(slot, now: 4599))
        #expect(tables.isExpired(slot, now: 4600))
    }

    @Test("touches are logged at most once per interval")
    func touchInterval() {
        var tables = StoreTables()
        var none: [StoreTables.Undo]? = nil
        tables.create(Self.new(1, Self.alice), undo: &none)
        let slot = tables.slot(of: SessionID(high: 1, low: 1))!
        #expect(tables.touch(slot, now: 1030, touchInterval: 60, undo: &none) == nil)
        #expect(tables.touch(slot, now: 1059, touchInterval: 60, undo: &none) == nil)
        #expect(tables.touch(slot, now: 1060, touchInterval: 60, undo: &none) == .sessionTouch(SessionID(high: 1, low: 1), lastSeenAt: 1060))
        #expect(tables.touch(slot, now: 1100, touchInterval: 60, undo: &none) == nil)
        #expect(tables.session(at: slot).lastSeenAt == 1100)
    }

    @Test("undo takes back any sequence of changes exactly")
    func undo() {
        var tables = StoreTables()
        var none: [StoreTables.Undo]? = nil
        tables.create(Self.new(1, Self.alice), undo: &none)
        tables.create(Self.new(2, Self.alice), undo: &none)
        tables.create(Self.new(3, Self.bob), undo: &none)
        let before = Self.picture(tables)

        var undo: [StoreTables.Undo]? = []
        tables.create(Self.new(4, Self.alice, at: 1000), undo: &undo)
        _ = tables.touch(tables.slot(of: SessionID(high: 4, low: 4))!, now: 1000 + 61, touchInterval: 60, undo: &undo)
        tables.remove(SessionID(high: 1, low: 1), undo: &undo)
        _ = tables.removeAll(of: Self.bob, undo: &undo)
        tables.setUser(Self.bob, nil, undo: &undo)
        tables.setUser(Self.alice, StoreTables.UserState(createdAt: 1, updatedAt: 2, lastLoginAt: nil, fields: ["email": "x@y.z"]), undo: &undo)
        #expect(Self.picture(tables) != before)
        tables.rollBack(undo!)
        #expect(Self.picture(tables) == before)
        #expect(tables.sessionCount == 3)
        #expect(tables.userCount == 2)
    }

    @Test("a principal with no user and no sessions is released; sweeping frees expired sessions only")
    func sweep() {
        var tables = StoreTables()
        var none: [StoreTables.Undo]? = nil
        for n in 1...100 as ClosedRange<UInt64> {
            tables.create(Self.new(n, n % 2 == 0 ? Self.alice : Self.bob, at: 1000, ttl: n <= 50 ? 10 : 1000), undo: &none)
        }
        var cursor = 0
        var removed = 0
        repeat {
            let step = tables.sweep(now: 1010, from: cursor, limit: 7)
            removed += step.removed
            cursor = step.next
        } while cursor != 0
        #expect(removed == 50)
        #expect(tables.sessionCount == 50)
        #expect(tables.sessions(of: Self.alice, now: 1010).count == 25)
        _ = tables.removeAll(of: Self.bob, undo: &none)
        tables.setUser(Self.bob, nil, undo: &none)
        #expect(tables.user(Self.bob) == nil)
        #expect(tables.userCount == 1)
        // Slots are reused: new sessions fit where the old ones were.
        tables.create(Self.new(500, Self.bob), undo: &none)
        #expect(tables.sessions(of: Self.bob, now: 1010).map(\.id.high) == [500])
    }

    @Test("replaying records rebuilds the same tables")
    func replay() {
        var live = StoreTables()
        var records: [StoreRecord] = []
        var none: [StoreTables.Undo]? = nil
        for n in 1...20 as ClosedRange<UInt64> {
            let new = Self.new(n, n % 3 == 0 ? Self.bob : Self.alice)
            live.create(new, undo: &none)
            records.append(.sessionCreate(new))
        }
        live.remove(SessionID(high: 5, low: 5), undo: &none)
        records.append(.sessionRevoke(SessionID(high: 5, low: 5)))
        _ = live.removeAll(of: Self.bob, undo: &none)
        records.append(.sessionRevokeAll(Self.bob))
        let user = User(principal: Self.alice, createdAt: 1000, updatedAt: 1200, lastLoginAt: 1000, fields: ["name": ["given": "A"]])
        live.setUser(Self.alice, StoreTables.UserState(user), undo: &none)
        records.append(.userPut(Self.alice, user.recordJSON))

        var replayed = StoreTables()
        for record in records { replayed.apply(record) }
        #expect(Self.picture(replayed) == Self.picture(live))
    }
}
