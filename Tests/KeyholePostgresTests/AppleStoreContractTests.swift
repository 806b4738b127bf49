import KeyholePostgres
import KeyholeProtocol
import KeyholeStore
import Testing

extension PostgresSuites {
    /// What Sign in with Apple asks of a store (`AppleStoring`), the same from the local store and
    /// from PostgreSQL: conditional changes, moves, deletions that queue work, walks, the outbox.
    @Suite("Apple's store contract: local and PostgreSQL", .serialized)
    struct AppleStoreContractTests {
        static let now: Int64 = 1_800_000_000
        static let alice = Principal(issuer: "apple", sub: "001.alice")

        @Test("signIn: the record made (or changed) and a session of the user's in one change, the last login stamped without moving updated_at", arguments: Backend.allCases)
        func signIn(backend: Backend) async throws {
            try await backend.with { store in
                let first = try await store.signIn(Self.alice, now: Self.now, ttl: 3600, idle: 600, data: Array(#"{"via":"web"}"#.utf8)) { user in
                    user.fields["email"] = "a@example.com"
                }
                #expect(first.created && first.user.fields["email"] == "a@example.com")
                #expect(first.user.createdAt == Self.now && first.user.updatedAt == Self.now && first.user.lastLoginAt == Self.now)
                #expect(first.session.principal == Self.alice && first.session.expiresAt == Self.now + 3600 && first.session.idleSeconds == 600)
                let read = try #require(try await store.session(token: first.token, now: Self.now + 1))
                #expect(read.session.id == first.session.id && read.session.data == Array(#"{"via":"web"}"#.utf8))
                #expect(read.user == first.user)

                // Again, with nothing to change in the record: only its last login moves.
                let again = try await store.signIn(Self.alice, now: Self.now + 100, ttl: 60, idle: 60, data: nil) { _ in }
                #expect(!again.created && again.user.updatedAt == Self.now && again.user.lastLoginAt == Self.now + 100)
                #expect(again.token != first.token && again.session.data == nil)
                #expect(try await store.user(Self.alice) == again.user)
                #expect(try await store.sessions(of: Self.alice, now: Self.now + 100).count == 2)

                // A change moves updated_at too.
                let changed = try await store.signIn(Self.alice, now: Self.now + 200, ttl: 60, idle: 60, data: nil) { user in
                    user.fields["email"] = "b@example.com"
                }
                #expect(changed.user.updatedAt == Self.now + 200 && changed.user.lastLoginAt == Self.now + 200)
                #expect(try await store.session(token: changed.token, now: Self.now + 201)?.user?.fields["email"] == "b@example.com")
            }
        }

        @Test("modifyUser: never creates; a refused change writes nothing; an applied one can take the sessions with it", arguments: Backend.allCases)
        func modify(backend: Backend) async throws {
            try await backend.with { store in
                // No closure inside #expect or #require in this suite: seen here, a closure there was
                // called in place of the next call's own.
                let nobody = try await store.modifyUser(Self.alice, now: Self.now, revokeSessions: true) { _ in true }
                #expect(nobody == nil)
                #expect(try await store.user(Self.alice) == nil, "not created")

                let (live, _) = try await store.createSession(for: Self.alice, now: Self.now, ttl: 3600, idle: 3600, data: nil)
                let (short, _) = try await store.createSession(for: Self.alice, now: Self.now, ttl: 10, idle: 10, data: nil)
                let refusing = try await store.modifyUser(Self.alice, now: Self.now + 50, revokeSessions: true) { user in
                    user.fields["email"] = "x@example.com"
                    return false
                }
                let refused = try #require(refusing)
                #expect(!refused.applied && refused.sessions == 0 && refused.user.fields["email"] == nil)
                #expect(try await store.user(Self.alice)?.updatedAt == Self.now, "nothing written")
                #expect(try await store.session(token: live, now: Self.now + 50) != nil)

                let keeping = try await store.modifyUser(Self.alice, now: Self.now + 60, revokeSessions: false) { user in
                    user.fields["email"] = "a@example.com"
                    return true
                }
                let kept = try #require(keeping)
                #expect(kept.applied && kept.sessions == 0 && kept.user.updatedAt == Self.now + 60)
                #expect(try await store.session(token: live, now: Self.now + 61)?.user?.fields["email"] == "a@example.com")

                let revoking = try await store.modifyUser(Self.alice, now: Self.now + 70, revokeSessions: true) { user in
                    user.fields["consent_revoked_at"] = .int(Self.now + 70)
                    return true
                }
                let revoked = try #require(revoking)
                #expect(revoked.applied && revoked.sessions == 1, "one live session (the other had expired)")
                #expect(try await store.session(token: live, now: Self.now + 71) == nil)
                #expect(try await store.session(token: short, now: Self.now + 71) == nil)
                #expect(try await store.user(Self.alice)?.fields["consent_revoked_at"] == .int(Self.now + 70))
            }
        }

        @Test("moveUser: the record and sessions go to the new sub (tokens unchanged), the receiving record wins member by member", arguments: Backend.allCases)
        func move(backend: Backend) async throws {
            try await backend.with { store in
                let old = Principal(issuer: "apple", sub: "transfer.old"), new = Principal(issuer: "apple", sub: "001.new")
                _ = try await store.updateUser(old, now: Self.now) { user in
                    user.fields["email"] = "old@example.com"
                    user.fields["name"] = ["given": "Old"]
                    user.fields["ext"] = ["apple": ["client_id": "com.example"]]
                }
                let (token, session) = try await store.createSession(for: old, now: Self.now + 5, ttl: 3600, idle: 3600, data: Array(#"{"k":1}"#.utf8))
                _ = try await store.updateUser(new, now: Self.now + 10) { $0.fields["email"] = "new@example.com" }

                let result = try await store.moveUser(old, to: new, now: Self.now + 20) { user in user.fields.removeValue(forKey: "ext") }
                let moved = try #require(result)
                #expect(moved.sessions == 1)
                let user = try #require(moved.user)
                #expect(user.principal == new && user.fields["email"] == "new@example.com" && user.fields["name"] == ["given": "Old"])
                #expect(user.fields["ext"] == nil, "adjusted")
                #expect(user.createdAt == Self.now && user.lastLoginAt == Self.now + 5 && user.updatedAt == Self.now + 20)
                #expect(try await store.user(new) == user)
                #expect(try await store.user(old) == nil)
                let (read, readUser) = try #require(try await store.session(token: token, now: Self.now + 30))
                #expect(read.id == session.id && read.principal == new && read.data == Array(#"{"k":1}"#.utf8) && readUser == user)
                #expect(try await store.sessions(of: old, now: Self.now + 30).isEmpty)
                let nothing = try await store.moveUser(old, to: new, now: Self.now + 40) { _ in }
                #expect(nothing == nil, "nothing left to move")
                let itself = try await store.moveUser(new, to: new, now: Self.now + 40) { _ in }
                #expect(itself == nil, "onto itself: nothing")

                // Onto a sub with no record: made from the moved one.
                let third = Principal(issuer: "apple", sub: "001.third")
                let movedAgain = try await store.moveUser(new, to: third, now: Self.now + 50) { _ in }
                let again = try #require(movedAgain)
                #expect(again.user?.principal == third && again.user?.fields["email"] == "new@example.com" && again.sessions == 1)
                #expect(try await store.session(token: token, now: Self.now + 51)?.session.principal == third)
            }
        }

        @Test("deleteUser with work: refused by its condition nothing goes; else the record, sessions and the work's entry in one change, the entry worked once", arguments: Backend.allCases)
        func deleteWithWork(backend: Backend) async throws {
            try await backend.with { store in
                _ = try await store.updateUser(Self.alice, now: Self.now) { $0.fields["email"] = "a@example.com" }
                let (token, _) = try await store.createSession(for: Self.alice, now: Self.now, ttl: 3600, idle: 3600, data: nil)
                let refused = try await store.deleteUser(Self.alice, now: Self.now + 1, when: { $0?.fields["email"] == nil }) { _ in
                    ("apple.revoke", ["sub": "001.alice"])
                }
                #expect(!refused.deleted && refused.outbox == nil)
                #expect(try await store.session(token: token, now: Self.now + 1) != nil)
                #expect(try await store.outbox(kind: "apple.revoke").isEmpty)

                let deleted = try await store.deleteUser(Self.alice, now: Self.now + 2, when: { $0 != nil }) { user in
                    ("apple.revoke", ["sub": .string(user.principal.sub), "email": user.fields["email"] ?? .null])
                }
                #expect(deleted.deleted && deleted.sessions == 1)
                let entry = try #require(deleted.outbox)
                #expect(entry.kind == "apple.revoke" && entry.payload == ["sub": "001.alice", "email": "a@example.com"] && entry.createdAt == Self.now + 2)
                #expect(try await store.user(Self.alice) == nil)
                #expect(try await store.session(token: token, now: Self.now + 3) == nil)
                #expect(try await store.outbox(kind: "apple.revoke") == [entry])
                #expect(try await store.outbox(kind: "other").isEmpty)

                #expect(try await store.claimOutbox(entry.id, lease: 60, now: Self.now + 3) == .claimed)
                try await store.releaseOutbox(entry.id, retryAt: Self.now + 100, now: Self.now + 4)
                #expect(try await store.completeOutbox(entry.id) == (backend == .local), "PostgreSQL: released, no longer this host's to complete")
                if backend == .postgres {
                    #expect(try await store.claimOutbox(entry.id, lease: 60, now: Self.now + 99) == .busy(until: Self.now + 100), "put off")
                    #expect(try await store.claimOutbox(entry.id, lease: 60, now: Self.now + 100) == .claimed)
                    #expect(try await store.completeOutbox(entry.id))
                }
                #expect(try await store.outbox(kind: "apple.revoke").isEmpty)
                #expect(try await store.claimOutbox(entry.id, lease: 60, now: Self.now + 200) == .gone)
                #expect(try await store.completeOutbox(entry.id) == false)

                // No record, only a session: deleted, and no work (nothing to revoke).
                let bare = Principal(issuer: "apple", sub: "001.bare")
                _ = try await store.createSession(for: bare, now: Self.now, ttl: 3600, idle: 3600, data: nil)
                _ = try await store.deleteUser(bare, now: Self.now, when: { _ in true }) { _ in nil }
                let none = try await store.deleteUser(bare, now: Self.now + 1, when: { _ in true }) { _ in ("x", [:]) }
                #expect(!none.deleted && none.sessions == 0 && none.outbox == nil)
            }
        }

        @Test("a walk through one issuer's users, a slice at a time, meets each once and no other issuer's", arguments: Backend.allCases)
        func walk(backend: Backend) async throws {
            try await backend.with { store in
                let subs = ["001.a", "001.b", "Jos\u{E9}", "Jose\u{301}", "\u{212A}ate", "a\u{0}b", "z"]
                for sub in subs { _ = try await store.updateUser(Principal(issuer: "apple", sub: sub), now: Self.now) { $0.fields["n"] = 1 } }
                for sub in ["001.a", "other"] { _ = try await store.updateUser(Principal(issuer: "corp", sub: sub), now: Self.now) { $0.fields["n"] = 2 } }
                var seen: [Principal] = []
                var cursor: UserCursor?
                var slices = 0
                repeat {
                    let (users, next) = try await store.users(of: "apple", from: cursor, limit: 2)
                    seen += users.map(\.principal)
                    cursor = next
                    slices += 1
                } while cursor != nil && slices < 100
                #expect(Set(seen) == Set(subs.map { Principal(issuer: "apple", sub: $0) }))
                #expect(seen.count == subs.count, "each once")
                #expect(try await store.users(of: "nobody", from: nil, limit: 10).users.isEmpty)
            }
        }
    }
}
