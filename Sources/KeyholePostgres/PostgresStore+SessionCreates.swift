import KeyholeStore
import NIOCore
import PostgresNIO

/// A session.create waiting for its batch (`SessionCreates`).
struct SessionCreate: Sendable {
    let principal: Principal
    let now: Int64
    let ttl: Int64
    let idle: UInt32
    let data: [UInt8]?
}

typealias PendingCreate = PendingCall<SessionCreate, (token: String, session: Session)>

extension PostgresStore {
    /// Creates a session for `principal` and returns its token (shown once, never stored) and the
    /// session, once committed. Creates the user's record when they have none and stamps their last
    /// login, as the local store does. No notification: no host can have the new session cached.
    public func createSession(
        for principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?
    ) async throws(PostgresStoreError) -> (token: String, session: Session) {
        try await withCheckedContinuation { waiting in
            createSession(for: principal, now: now, ttl: ttl, idle: idle, data: data) { waiting.resume(returning: $0) }
        }.get()
    }

    /// `createSession(for:now:ttl:idle:data:)`, its outcome handed to `completion` (once, from any
    /// thread): committed with the next batch of creates (`StatementBatcher`), bounded by the
    /// timeout from now.
    public func createSession(
        for principal: Principal, now: Int64, ttl: Int64, idle: UInt32, data: [UInt8]?,
        completion: @escaping @Sendable (Result<(token: String, session: Session), PostgresStoreError>) -> Void
    ) {
        let call = PendingCreate(
            SessionCreate(principal: principal, now: now, ttl: ttl, idle: idle, data: data), within: configuration.timeout,
            doing: "creating a session", completion: completion)
        creates.submit(call, to: SessionCreates())
    }
}

/// New tokens for one batch, none repeating an id already given in it (whose row would go in once
/// and answer for both).
private struct SessionTokens {
    private var given = Set<SessionID>()

    mutating func next() -> (token: String, id: SessionID, check: SessionCheck)? {
        for _ in 0..<3 {
            guard let generated = SessionToken.generate() else { return nil }
            if given.insert(generated.id).inserted { return generated }
        }
        return nil
    }
}

/// Runs a batch of creates: one statement (one transaction, one commit) for all of them, then
/// each call answered (POSTGRES.md, "Cost per request"). An id already taken is tried again under
/// another token, in a further statement.
struct SessionCreates: BatchRunner {
    static let sql = PostgresStatements.createSessions

    private typealias Attempt = (call: PendingCreate, token: String, id: SessionID, check: SessionCheck)

    /// Every call is answered within the future (a retried id needs a further statement first).
    func run(_ batch: [PendingCreate], through statement: PreparedQuery, on eventLoop: any EventLoop) -> EventLoopFuture<BatchAnswers> {
        var tokens = SessionTokens()
        var round: [Attempt] = []
        for call in batch {
            guard let (token, id, check) = tokens.next() else {
                call.fail(.unavailable("the random number generator failed"))
                continue
            }
            round.append((call, token, id, check))
        }
        return attempt(round, tokens: tokens, left: 3, through: statement, on: eventLoop).map { {} }
    }

    /// Whether `error` is PostgreSQL's breaking of a deadlock. A batch holds several users' rows,
    /// taken in lock order; but `moveUser` makes its receiving user's row only after it locked the
    /// other, so it and a batch holding both can each wait for the other. PostgreSQL ends one;
    /// when that is the batch (nothing of it committed), it is sent again, once.
    static func isDeadlock(_ error: any Error) -> Bool {
        if case .server(let info) = error as? PostgresError { return info.fields[.sqlState] == "40P01" }
        return false
    }

    /// One statement for `round`; the calls whose id was taken go again, `left - 1` more times.
    private func attempt(
        _ round: [Attempt], tokens: SessionTokens, left: Int, through statement: PreparedQuery, on eventLoop: any EventLoop
    ) -> EventLoopFuture<Void> {
        guard !round.isEmpty else { return eventLoop.makeSucceededVoidFuture() }
        guard left > 0 else {
            // A repeated id needs a repeated 128-bit hash prefix: this is for form's sake. The login
            // stamps stay: a sign-in did happen.
            for attempt in round { attempt.call.fail(.unavailable("could not find an unused session id")) }
            return eventLoop.makeSucceededVoidFuture()
        }
        return statement.execute(Self.binds(round)).flatMapError { error in
            guard Self.isDeadlock(error) else { return eventLoop.makeFailedFuture(error) }
            return statement.execute(Self.binds(round))
        }.flatMap { rows in
            var inserted = Set<SessionID>()
            for row in rows {
                var cells = PostgresStatements.Cells(row)
                if let bytes = try? cells.bytes(), let id = SessionID(bytes: bytes.readableBytesView) {
                    inserted.insert(id)
                }
            }
            var tokens = tokens
            var again: [Attempt] = []
            for (call, token, id, _) in round {
                let request = call.request
                if inserted.contains(id) {
                    let session = Session(
                        id: id, principal: request.principal, createdAt: request.now, expiresAt: request.now + request.ttl,
                        lastSeenAt: request.now, idleSeconds: request.idle, data: request.data)
                    call.answer(.success((token, session)))
                } else if let (token, id, check) = tokens.next() {
                    again.append((call, token, id, check))
                } else {
                    call.fail(.unavailable("the random number generator failed"))
                }
            }
            return attempt(again, tokens: tokens, left: left - 1, through: statement, on: eventLoop)
        }
    }

    /// The statement's binds for `round`: the users once each, in lock order, with their latest
    /// login; then the sessions.
    private static func binds(_ round: [Attempt]) -> [PostgresData] {
        var logins: [Principal: Int64] = [:]
        for attempt in round {
            let request = attempt.call.request
            logins[request.principal] = max(logins[request.principal] ?? request.now, request.now)
        }
        let users = logins.keys.sorted(by: PostgresRows.locksBefore)
        var ids: [ByteBuffer] = [], checks: [ByteBuffer] = [], issuers: [ByteBuffer] = [], subs: [ByteBuffer] = []
        var created: [Int64] = [], expires: [Int64] = [], idle: [Int32] = [], data: [ByteBuffer] = [], hasData: [Bool] = []
        for (call, _, id, check) in round {
            let request = call.request
            ids.append(PostgresRows.bytes(id.bytes))
            checks.append(PostgresRows.bytes(check.bytes))
            issuers.append(PostgresRows.bytes(request.principal.issuer))
            subs.append(PostgresRows.bytes(request.principal.sub))
            created.append(request.now)
            expires.append(request.now + request.ttl)
            idle.append(Int32(clamping: request.idle))  // the protocol keeps idle_s far below 2^31
            data.append(PostgresRows.bytes(request.data ?? []))
            hasData.append(request.data != nil)
        }
        return [
            PostgresStatements.bind(users.map { PostgresRows.bytes($0.issuer) }), PostgresStatements.bind(users.map { PostgresRows.bytes($0.sub) }),
            PostgresStatements.bind(users.map { logins[$0]! }),
            PostgresStatements.bind(ids), PostgresStatements.bind(checks), PostgresStatements.bind(issuers), PostgresStatements.bind(subs),
            PostgresStatements.bind(created), PostgresStatements.bind(expires), PostgresStatements.bind(idle), PostgresStatements.bind(data),
            PostgresStatements.bind(hasData),
        ]
    }
}
