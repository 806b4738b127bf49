import KeyholePostgres
import KeyholeProtocol
import KeyholeStore
import NIOCore
import Testing

extension PostgresSuites {
    /// What every store does the same (POSTGRES.md, "What holds in both backends"), run against the
    /// local store and against PostgreSQL: the first cases of the suite both will share.
    @Suite("store contract: local and PostgreSQL", .serialized)
    struct StoreContractTests {
        static let now: Int64 = 1_800_000_000
        static let alice = Principal(issuer: "corp", sub: "alice")

        @Test("a session: created with its user, read back with it, used (idle deadline moves), listed, revoked", arguments: Backend.allCases)
        func lifecycle(backend: Backend) async throws {
            try await backend.with { store in
                let (token, created) = try await store.createSession(for: Self.alice, now: Self.now, ttl: 3600, idle: 600, data: Array(#"{"theme":"dark"}"#.utf8))
                #expect(token.hasPrefix("kh_") && token.utf8.count == 46)
                #expect(created.expiresAt == Self.now + 3600 && created.lastSeenAt == Self.now && created.idleSeconds == 600)
                let user = try #require(try await store.user(Self.alice))
                #expect(user.createdAt == Self.now && user.lastLoginAt == Self.now && user.fields.isEmpty)

                let (read, readUser) = try #require(try await store.session(token: token, now: Self.now + 500))
                #expect(read.id == created.id && read.principal == Self.alice && read.data == Array(#"{"theme":"dark"}"#.utf8))
                #expect(read.lastSeenAt == Self.now + 500)
                #expect(readUser == user)
                // Used at +500: alive at +1000 (idle 600 from the last use), gone 600 s after the last.
                #expect(try await store.session(token: token, now: Self.now + 1000) != nil)
                #expect(try await store.session(token: token, now: Self.now + 1600) == nil)
                #expect(try await store.sessions(of: Self.alice, now: Self.now + 1600).isEmpty)

                let (second, session) = try await store.createSession(for: Self.alice, now: Self.now + 2000, ttl: 3600, idle: 600, data: nil)
                #expect(try await store.sessions(of: Self.alice, now: Self.now + 2000).map(\.id) == [session.id])
                #expect(try await store.user(Self.alice)?.lastLoginAt == Self.now + 2000)
                #expect(try await store.revokeSession(token: second, now: Self.now + 2001))
                #expect(try await store.session(token: second, now: Self.now + 2002) == nil)
                #expect(try await store.revokeSession(token: second, now: Self.now + 2003) == false, "revoked twice: nothing live")
            }
        }

        @Test("a token of the right id and a wrong check finds nothing and revokes nothing; malformed tokens are no session", arguments: Backend.allCases)
        func wrongCheck(backend: Backend) async throws {
            try await backend.with { store in
                let (token, session) = try await store.createSession(for: Self.alice, now: Self.now, ttl: 3600, idle: 3600, data: nil)
                // Another token with the same id cannot be made (it needs a SHA-256 prefix collision); a
                // tampered token has another id. Check that neither tampering nor garbage finds it.
                var tampered = Array(token.utf8)
                tampered[20] = tampered[20] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
                let other = String(decoding: tampered, as: UTF8.self)
                #expect(try await store.session(token: other, now: Self.now) == nil)
                #expect(try await store.revokeSession(token: other, now: Self.now) == false)
                for garbage in ["", "kh_", "kh_" + String(repeating: "!", count: 43), String(repeating: "a", count: 46)] {
                    #expect(try await store.session(token: garbage, now: Self.now) == nil)
                }
                #expect(try await store.session(token: token, now: Self.now)?.session.id == session.id, "still there")
                #expect(try await store.revokeSession(id: session.id, now: Self.now))
                #expect(try await store.session(token: token, now: Self.now) == nil)
            }
        }

        @Test("identities are bytes: an NFD sub, a KELVIN SIGN and a NUL are other users than their look-alikes", arguments: Backend.allCases)
        func identitiesAreBytes(backend: Backend) async throws {
            try await backend.with { store in
                let nfc = Principal(issuer: "corp", sub: "Jos\u{E9}"), nfd = Principal(issuer: "corp", sub: "Jose\u{301}")
                let kelvin = Principal(issuer: "corp", sub: "\u{212A}ate"), kate = Principal(issuer: "corp", sub: "Kate")
                let nul = Principal(issuer: "corp", sub: "a\u{0}b")
                for principal in [nfc, kelvin, nul] {
                    _ = try await store.createSession(for: principal, now: Self.now, ttl: 3600, idle: 3600, data: nil)
                }
                #expect(try await store.user(nfd) == nil)
                #expect(try await store.user(kate) == nil)
                #expect(try await store.user(nul)?.principal.sub == "a\u{0}b")
                #expect(try await store.sessions(of: nfd, now: Self.now).isEmpty)
                #expect(try await store.revokeSessions(of: nfd, now: Self.now) == 0)
                #expect(try await store.sessions(of: nfc, now: Self.now).count == 1)
            }
        }

        @Test("user update creates or changes the record (updated_at moves, nothing written when nothing changes); delete takes its sessions", arguments: Backend.allCases)
        func users(backend: Backend) async throws {
            try await backend.with { store in
                let bob = Principal(issuer: "corp", sub: "bob")
                let (made, created) = try await store.updateUser(bob, now: Self.now) { $0.fields["email"] = "bob@example.com" }
                #expect(created && made.createdAt == Self.now && made.updatedAt == Self.now && made.lastLoginAt == nil)
                let (same, again) = try await store.updateUser(bob, now: Self.now + 10) { $0.fields["email"] = "bob@example.com" }
                #expect(!again && same.updatedAt == Self.now, "nothing changed: not written")
                let (changed, _) = try await store.updateUser(bob, now: Self.now + 20) { $0.fields["name"] = ["given": "Bob"] }
                #expect(changed.updatedAt == Self.now + 20 && changed.fields["name"] == ["given": "Bob"])
                #expect(try await store.user(bob) == changed)

                _ = try await store.createSession(for: bob, now: Self.now + 30, ttl: 3600, idle: 3600, data: nil)
                _ = try await store.createSession(for: bob, now: Self.now + 31, ttl: 10, idle: 10, data: nil)
                let deleted = try await store.deleteUser(bob, now: Self.now + 100)
                #expect(deleted.deleted && deleted.sessions == 1, "one of the two sessions was still live")
                #expect(try await store.user(bob) == nil)
                #expect(try await store.sessions(of: bob, now: Self.now + 100).isEmpty)
                #expect(try await store.deleteUser(bob, now: Self.now + 101) == (deleted: false, sessions: 0))
            }
        }

        @Test("revoke_all ends every live session of one user and no other's", arguments: Backend.allCases)
        func revokeAll(backend: Backend) async throws {
            try await backend.with { store in
                let carol = Principal(issuer: "corp", sub: "carol")
                var tokens: [String] = []
                for offset in 0..<3 { tokens.append(try await store.createSession(for: Self.alice, now: Self.now + Int64(offset), ttl: 3600, idle: 3600, data: nil).token) }
                let carols = try await store.createSession(for: carol, now: Self.now, ttl: 3600, idle: 3600, data: nil).token
                #expect(try await store.revokeSessions(of: Self.alice, now: Self.now + 10) == 3)
                for token in tokens { #expect(try await store.session(token: token, now: Self.now + 11) == nil) }
                #expect(try await store.session(token: carols, now: Self.now + 11) != nil)
                #expect(try await store.revokeSessions(of: Self.alice, now: Self.now + 12) == 0)
            }
        }

        @Test("session.get in one call (getSession): the bytes session(token:) gives, at once or through the completion made only then; a wrong check, a malformed or a revoked token not found", arguments: Backend.allCases)
        func getSession(backend: Backend) async throws {
            try await backend.with { store in
                let (token, session) = try await store.createSession(for: Self.alice, now: Self.now, ttl: 3600, idle: 600, data: Array(#"{"theme":"dark"}"#.utf8))
                var expected = ByteBuffer()
                let found = try #require(try await store.session(token: token, now: Self.now + 1))
                found.session.writeGetJSON(user: found.user, to: &expected)
                // Twice in the second it was read (PostgreSQL with a fresh cache may answer the second
                // in place), then a second later (a use to record).
                for now in [Self.now + 1, Self.now + 1] {
                    let got = try await Self.get(store, token, now: now)
                    #expect(got.bytes == expected, "\(got.outcome): \(got.bytes.map { String(buffer: $0) } ?? "nothing")")
                }
                let later = try await Self.get(store, token, now: Self.now + 2)
                #expect(later.bytes.map { String(buffer: $0) }?.contains(#""last_seen_at":\#(Self.now + 2)"#) == true, "\(later)")
                #expect(try await store.session(token: token, now: Self.now + 2)?.session.lastSeenAt == Self.now + 2)

                var tampered = Array(token.utf8)
                tampered[20] = tampered[20] == UInt8(ascii: "A") ? UInt8(ascii: "B") : UInt8(ascii: "A")
                #expect(try await Self.get(store, String(decoding: tampered, as: UTF8.self), now: Self.now + 3).bytes == nil)
                let malformed = try await Self.get(store, "kh_" + String(repeating: "!", count: 43), now: Self.now + 3)
                // PostgreSQL's store tells at once: a token that cannot be one asks nothing of the cache or the database.
                #expect(malformed.bytes == nil && (backend == .local || malformed.outcome == .notFound), "\(malformed)")
                #expect(try await store.revokeSession(id: session.id, now: Self.now + 4))
                #expect(try await Self.get(store, token, now: Self.now + 5).bytes == nil)
            }
        }

        /// `getSession` as session.get calls it (room made first): how it answered, and the answer's
        /// bytes (nil: no session), written at once or from the completion. Asserts that the
        /// completion was made exactly when the answer is later.
        static func get(_ store: any SessionStoring, _ token: String, now: Int64) async throws -> (outcome: SessionGet, bytes: ByteBuffer?) {
            var buffer = ByteBuffer(), token = token, asked = false
            buffer.reserveCapacity(minimumWritableBytes: 1024)
            let (answers, answering) = AsyncStream.makeStream(of: Result<(session: Session, user: User?)?, StoreError>.self)
            let outcome = token.withUTF8 { bytes in
                store.getSession(token: UnsafeRawBufferPointer(bytes), now: now, into: &buffer) {
                    asked = true
                    return { answer in
                        answering.yield(answer)
                        answering.finish()
                    }
                }
            }
            #expect(asked == (outcome == .later), "\(outcome), completion made: \(asked)")
            switch outcome {
            case .written: return (outcome, buffer)
            case .notFound:
                #expect(buffer.readableBytes == 0)
                return (outcome, nil)
            case .later:
                #expect(buffer.readableBytes == 0)
                var iterator = answers.makeAsyncIterator()
                guard let found = try #require(await iterator.next()).get() else { return (outcome, nil) }
                var written = ByteBuffer()
                found.session.writeGetJSON(user: found.user, to: &written)
                return (outcome, written)
            }
        }
    }
}
