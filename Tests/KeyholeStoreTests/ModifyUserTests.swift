import KeyholeProtocol
import Testing
@testable import KeyholeStore

/// `modifyUser`: changes a record that exists, never creates one, applies only what its closure
/// accepts, and revokes sessions in the same change only then; `users(from:)` walks every user.
@Suite("Modifying users", .serialized)
struct ModifyUserTests {
    static let alice = Principal(issuer: "apple", sub: "alice")
    let now: Int64 = 1_800_000_000

    @Test("no record: nothing created; refused: nothing changed, sessions kept; applied: record and sessions in one change")
    func modify() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var running = try RunningStore(directory, now: now)
        let store = running.store
        let missing = try await durably { done throws(StoreError) in
            try store.modifyUser(Self.alice, now: now, revokeSessions: true, completion: done) { user in
                user.fields["email"] = "x@example.com"
                return true
            }
        }
        #expect(missing == nil && store.user(Self.alice) == nil)
        for _ in 0..<2 {
            _ = try await durably { done throws(StoreError) in
                try store.createSession(for: Self.alice, now: now, ttl: 3600, idle: 600, data: nil, completion: done)
            }
        }
        let refused = try await durably { done throws(StoreError) in
            try store.modifyUser(Self.alice, now: now + 1, revokeSessions: true, completion: done) { user in
                user.fields["email"] = "dropped@example.com"
                return false
            }
        }
        #expect(refused?.applied == false && refused?.sessions == 0)
        #expect(store.user(Self.alice)?.fields["email"] == nil)
        #expect(store.sessions(of: Self.alice, now: now + 1).count == 2)
        let records = store.statistics.records
        let applied = try await durably { done throws(StoreError) in
            try store.modifyUser(Self.alice, now: now + 2, revokeSessions: true, completion: done) { user in
                user.fields["flag"] = true
                return true
            }
        }
        #expect(applied?.applied == true && applied?.sessions == 2)
        #expect(applied?.user.updatedAt == now + 2)
        #expect(store.statistics.records == records + 2)
        await running.close()

        running = try RunningStore(directory, now: now + 3)
        #expect(running.store.user(Self.alice)?.fields["flag"] == true)
        #expect(running.store.sessions(of: Self.alice, now: now + 3).isEmpty)
        await running.close()
    }

    @Test("users(from:limit:where:) visits every user once, a slice at a time")
    func scan() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        let running = try RunningStore(directory, now: now)
        for n in 0..<25 {
            _ = try await durably { [running] done throws(StoreError) in
                try running.store.updateUser(Principal(issuer: n % 2 == 0 ? "apple" : "local", sub: "u\(n)"), now: now, completion: done) { _ in }
            }
        }
        var seen: [String] = []
        var cursor = 0
        var slices = 0
        repeat {
            let (users, next) = running.store.users(from: cursor, limit: 4) { $0.principal.issuer == "apple" }
            seen += users.map(\.principal.sub)
            cursor = next
            slices += 1
        } while cursor != 0
        #expect(seen.count == 13 && Set(seen).count == 13)
        #expect(slices >= 7)
        await running.close()
    }

    @Test("moving a user takes their record and sessions (tokens unchanged) to the new principal; a record there wins member by member")
    func move() async throws {
        let directory = try TemporaryStateDirectory()
        defer { directory.cleanUp() }
        var running = try RunningStore(directory, now: now)
        let store = running.store
        let old = Principal(issuer: "apple", sub: "t.old")
        let new = Principal(issuer: "apple", sub: "002.new")
        _ = try await durably { done throws(StoreError) in
            try store.updateUser(old, now: now, completion: done) { user in
                user.fields["email"] = "old@example.com"
                user.fields["name"] = .object(["given": "Jane"])
            }
        }
        var tokens: [String] = []
        for _ in 0..<2 {
            tokens.append(try await durably { done throws(StoreError) in
                try store.createSession(for: old, now: now, ttl: 3600, idle: 600, data: nil, completion: done)
            }.token)
        }
        _ = try await durably { done throws(StoreError) in
            try store.updateUser(new, now: now + 1, completion: done) { $0.fields["email"] = "new@example.com" }
        }
        let moved = try await durably { done throws(StoreError) in try store.moveUser(old, to: new, now: now + 2, completion: done) }
        #expect(moved?.sessions == 2)
        #expect(moved?.user?.fields["email"] == "new@example.com")
        #expect(moved?.user?.fields["name"] == .object(["given": "Jane"]))
        #expect(moved?.user?.createdAt == now)
        #expect(store.user(old) == nil && store.sessions(of: old, now: now + 2).isEmpty)
        #expect(store.session(token: tokens[0], now: now + 3)?.session.principal == new)
        let nothing = try await durably { done throws(StoreError) in try store.moveUser(old, to: new, now: now + 2, completion: done) }
        #expect(nothing == nil)
        await running.close()

        running = try RunningStore(directory, now: now + 4)
        #expect(running.store.sessions(of: new, now: now + 4).count == 2)
        #expect(running.store.user(new)?.fields["name"] == .object(["given": "Jane"]))
        #expect(running.store.user(old) == nil)
        await running.close()
    }
}
